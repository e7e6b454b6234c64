"""A new user's first commands (issue 40), run as they would run them: a repository that
is missing or is a file, a port already in use (checked before any model loads, and
held while they load), `pbserve --help`, a flag that does not parse, and
`scripts/cluster.py --help`. Each is a real `python -m pbserve` process."""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pbserve.cli.parser import build_parser
from pbserve.secret_env import PLANE_PASSWORD_ENV
from pbserve.testing import free_ports, stop_process_group

ROOT = Path(__file__).resolve().parents[2]
TRITON_GROUPS = ["Server", "Logging", "Model Repository", "HTTP", "GRPC", "Metrics",
                 "Tracing", "Backend", "Response Cache", "Rate Limiter",
                 "Memory/Device Management", "DEPRECATED"]
# A model whose initialize leaves a mark, then waits for a "go" file (60 s at most).
MARKER_MODEL = '''
import pathlib
import time


class TritonPythonModel:
    def initialize(self, args):
        here = pathlib.Path(args["model_repository"])
        (here / "initialized").touch()
        deadline = time.monotonic() + 60
        while not (here / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    def execute(self, requests):
        return []
'''
MARKER_CONFIG = '''name: "marker"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]
'''


def _pbserve(*args: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pbserve", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, **kwargs)


def _marker_repo(tmp_path: Path) -> Path:
    model = tmp_path / "repo" / "marker"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(MARKER_CONFIG)
    (model / "1" / "model.py").write_text(MARKER_MODEL)
    return tmp_path / "repo"


def _ports(busy_flag: str, busy: int) -> list[str]:
    http, grpc, metrics = free_ports(3)
    ports = {"--http-port": http, "--grpc-port": grpc, "--metrics-port": metrics,
             busy_flag: busy}
    return [a for flag, port in ports.items() for a in (flag, str(port))]


def _listening() -> socket.socket:
    """A socket listening on a free loopback port: a server already there."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


# --- the repository ------------------------------------------------------------------

def test_a_missing_repository_is_one_line_in_tritonservers_words(tmp_path):
    missing = tmp_path / "nope"
    done = _pbserve("--model-repository", str(missing))
    assert done.returncode == 1
    assert done.stderr == f"error: creating server: Internal - failed to stat file {missing}\n"


def test_a_file_given_as_the_repository_is_one_line(tmp_path):
    file = tmp_path / "models.txt"
    file.write_text("not a directory")
    done = _pbserve("--model-repository", str(file))
    assert done.returncode == 1
    assert done.stderr == ("error: creating server: Invalid argument - repository path is "
                           f"not a valid directory: {file}\n")


def test_a_missing_repository_among_good_ones_is_named(tmp_path):
    missing = tmp_path / "nope"
    done = _pbserve("--model-repository", str(_marker_repo(tmp_path)),
                    "--model-repository", str(missing))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: creating server: Internal - failed to stat file {missing}"]
    assert not (tmp_path / "repo" / "marker" / "initialized").exists()


# --- a port in use -------------------------------------------------------------------

@pytest.mark.parametrize("flag, service, extra", [
    ("--http-port", "HTTP", []),
    ("--grpc-port", "GRPC", []),
    ("--grpc-port", "GRPC", ["--grpc-transport", "grpcio"]),
    ("--metrics-port", "Metrics", []),
])
def test_a_port_in_use_stops_start_up_before_any_model_loads(tmp_path, flag, service, extra):
    repo = _marker_repo(tmp_path)
    with _listening() as busy:
        port = busy.getsockname()[1]
        done = _pbserve("--model-repository", str(repo), *_ports(flag, port), *extra)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].endswith(f"failed to start {service} service: Unavailable - "
                             f"Socket '127.0.0.1:{port}' already in use")
    assert lines[0].startswith("E")  # an error line of the log, as tritonserver's
    assert not (repo / "marker" / "initialized").exists()  # no stub ever started


@pytest.mark.parametrize("with_repository", [True, False], ids=["worker", "frontend"])
def test_a_port_in_use_stops_a_request_plane_process_before_it_joins(tmp_path,
                                                                     with_repository):
    """A worker (a repository) and a frontend (none) check their ports first: before
    their models load and before they connect to NATS (here, nothing listens there)."""
    nats_port, = free_ports(1)
    repo = ["--model-repository", str(_marker_repo(tmp_path))] if with_repository else []
    with _listening() as busy:
        port = busy.getsockname()[1]
        done = _pbserve(*repo, "--request-plane", f"nats://127.0.0.1:{nats_port}",
                        *_ports("--http-port", port))
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].endswith(
        f"failed to start HTTP service: Unavailable - Socket '127.0.0.1:{port}' "
        f"already in use")
    assert "nats" not in done.stderr.lower()
    assert not (tmp_path / "repo" / "marker" / "initialized").exists()


def test_the_ports_are_held_while_the_models_load_then_served(tmp_path):
    repo = _marker_repo(tmp_path)
    http, grpc, metrics = free_ports(3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pbserve", "--model-repository", str(repo),
         "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (repo / "marker" / "initialized").exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        for port in (http, grpc, metrics):  # a server that would bind meanwhile cannot
            other = socket.socket()
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with other, pytest.raises(OSError) as err:
                other.bind(("127.0.0.1", port))
                other.listen()
            assert "in use" in str(err.value)
        (repo / "marker" / "go").touch()
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready",
                                    timeout=60) as reply:
            assert reply.status == 200  # asked while loading, answered once served
    finally:
        stop_process_group(proc, 30)
        proc.stderr.close()
    assert proc.returncode == 0


# --- pbserve --help ------------------------------------------------------------------

def _help_blocks(text: str) -> dict[str, str]:
    """Each flag's entry of --help (its option strings' line and the help under it),
    by each of its option strings, whitespace folded."""
    blocks: dict[str, str] = {}
    names: list[str] = []
    for line in text.splitlines():
        if re.match(r"^  -", line):
            names = re.findall(r"(--?[a-z][a-z0-9-]*)", line.split("  ", 2)[1])
            for name in names:
                blocks[name] = line
        elif line.startswith("    ") and names:
            for name in names:
                blocks[name] += " " + line
        else:
            names = []
    return {name: " ".join(block.split()) for name, block in blocks.items()}


def _shown_flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if a.help is not argparse.SUPPRESS and a.option_strings != ["-h", "--help"]]


def test_help_gives_every_flag_a_line_and_its_default():
    done = _pbserve("--help", env={**os.environ, PLANE_PASSWORD_ENV: "hunter2-secret"})
    assert done.returncode == 0 and done.stderr == ""
    blocks = _help_blocks(done.stdout)
    parser = build_parser()
    for action in _shown_flags(parser):
        block = blocks[action.option_strings[0]]
        assert action.help, action.option_strings
        default = action.default
        if default not in (None, [], "") and not getattr(action, "hide_default", False):
            assert f"(default: {default})" in block, block
    assert "hunter2-secret" not in done.stdout  # a secret from the environment stays hidden
    assert "(default: 8000)" in blocks["--http-port"]
    assert "(default: none)" in blocks["--model-control-mode"]


def test_help_groups_the_flags_as_tritonserver_and_pbserves_apart():
    done = _pbserve("--help")
    titles = [line[:-1] for line in done.stdout.splitlines()
              if line.endswith(":") and not line.startswith(" ")]
    assert [t for t in titles if t in TRITON_GROUPS] == TRITON_GROUPS
    sections = re.split(r"\n(?=\S[^\n]*:\n)", done.stdout)
    by_title = {s.split(":\n", 1)[0]: s for s in sections}
    assert "--http-port" in by_title["HTTP"] and "--grpc-port" in by_title["GRPC"]
    assert "--log-verbose" in by_title["Logging"]
    assert "--strict-model-config" in by_title["DEPRECATED"]
    assert "--stub-zygote" in by_title["pbserve"]
    assert "--request-plane " in by_title["pbserve: request plane"]
    assert "--stub-zygote" not in by_title["Model Repository"]
    # the ignored flags are named once, not listed one by one
    assert "--sagemaker-port" in by_title["Accepted and ignored"]
    assert not re.search(r"^ +--sagemaker-port", done.stdout, re.MULTILINE)


@pytest.mark.parametrize("args, error", [
    (["--model-repository", "/tmp", "--bogus"], "unrecognized arguments: --bogus"),
    (["--model-repository", "/tmp", "--http-port", "x"],
     "argument --http-port: invalid int value: 'x'"),
    (["--model-repository", "/tmp", "--model-control-mode", "always"],
     "argument --model-control-mode: invalid choice: 'always'"),
    ([], "--model-repository is required"),
])
def test_a_flag_that_does_not_parse_is_a_short_usage_then_the_error(args, error):
    done = _pbserve(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "usage: pbserve [options] (see pbserve --help)"
    assert len(lines) == 2
    assert lines[-1].startswith(f"pbserve: error: {error}")


# --- scripts/cluster.py --help -------------------------------------------------------

@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_cluster_script_help_prints_its_help(flag):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cluster.py"), flag],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "--model-repository REPO" in done.stdout and "--workers N" in done.stdout
