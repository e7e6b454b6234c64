"""Run the documented commands (tests/doc_commands.py) from the repository root.

- `pbserve ...`: started as written, its `--http-port`/`--grpc-port`/`--metrics-port`
  set to free ports (replaced, or appended when absent); it must become ready
  (/v2/health/ready) and exit 0 on SIGINT. With `--help`/`--version` it must exit 0.
- A block with a `nats-server` is a cluster: nats-server first (its `-p` a free port, its
  JetStream store a temporary directory), then the block's `pbserve`s at once, their
  `nats://HOST:PORT` pointed at it (and a `--data-plane-address` on a free port added,
  as pbserve.testing does, so no listener takes a port chosen for another server).
- `curl ...` and python snippets that name `127.0.0.1:8000/8001/8002` run against the
  server of the README's first `pbserve` command ("with the server of the first command
  running"), those ports swapped for its own; curl must exit 0 (`--fail` appended)
  and answer no error. A snippet that defines `test_` functions runs under pytest.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from doc_commands import Command

from pbserve.distributed.nats_server import nats_server_path
from pbserve.testing import stop_process_group

PORT_FLAGS = ("--http-port", "--grpc-port", "--metrics-port")
EXITING_FLAGS = frozenset({"--help", "-h", "--version"})
DEFAULT_PORTS = (8000, 8001, 8002)  # pbserve's, which the client snippets name
READY_TIMEOUT = 60.0
CLIENT_TIMEOUT = 60.0
NATS_URL = re.compile(r"nats://[^/:]+:(\d+)")


@dataclass
class Outcome:
    ok: bool = False
    detail: str = "not run"


def set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """`flag`'s value replaced (`--f V` or `--f=V`), or `flag value` appended."""
    out = list(argv)
    for i, word in enumerate(out):
        if word == flag and i + 1 < len(out):
            out[i + 1] = value
            return out
        if word.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            return out
    return [*out, flag, value]


def flag_value(argv: tuple[str, ...] | list[str], flag: str) -> str | None:
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def program_args(command: Command) -> tuple[dict[str, str], list[str]]:
    """The command's `VAR=value`s before its program, and its arguments after it."""
    at = command.argv.index(command.program)
    return dict(a.split("=", 1) for a in command.argv[:at]), list(command.argv[at + 1:])


def pbserve_argv() -> list[str]:
    """The `pbserve` console script beside this interpreter (as the docs run it)."""
    script = Path(sys.executable).with_name("pbserve")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pbserve"]


class Process:
    """A long-running documented command, started in its own session, logging to a file."""

    def __init__(self, command: Command, argv: list[str], root: Path, log: Path) -> None:
        self.command = command
        self.argv = argv
        self.log_path = log
        self._log = open(log, "wb")
        env, _ = program_args(command)
        self.proc = subprocess.Popen(argv, cwd=root, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env={**os.environ, **env})

    def log_tail(self, chars: int = 3000) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-chars:]

    def failure(self, why: str) -> str:
        return f"{why}\ncommand: {' '.join(self.argv)}\nlog ends:\n{self.log_tail()}"

    def stop(self) -> int:
        stop_process_group(self.proc, 30)
        self._log.close()
        return self.proc.returncode


class DocServer(Process):
    """A documented `pbserve` on free ports."""

    def __init__(self, command: Command, root: Path, log: Path, ports: list[int],
                 nats_ports: dict[str, int]) -> None:
        """`ports`: four free ones (HTTP, gRPC, metrics, data plane); `nats_ports`:
        documented port -> the port of its block's nats-server."""
        argv = pbserve_argv() + program_args(command)[1]
        self.exits = bool(EXITING_FLAGS & set(argv))
        self.http_port, self.grpc_port, self.metrics_port = ports[:3]
        if not self.exits:
            for flag, port in zip(PORT_FLAGS, ports):
                argv = set_flag(argv, flag, str(port))
        plane = flag_value(argv, "--request-plane")
        if plane:
            match = NATS_URL.match(plane)
            port = nats_ports.get(match.group(1)) if match else None
            argv = set_flag(argv, "--request-plane", f"nats://127.0.0.1:{port}")
            if flag_value(argv, "--data-plane-address") is None:
                argv = set_flag(argv, "--data-plane-address", f"127.0.0.1:{ports[3]}")
        super().__init__(command, argv, root, log)

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> str | None:
        """None once ready (or, for --help, exited 0); else why not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.proc.poll()
            if self.exits and status is not None:
                return None if status == 0 else self.failure(f"exited with status {status}")
            if status is not None:
                return self.failure(f"exited with status {status} before it was ready")
            if not self.exits and self._answers("/v2/health/ready"):
                return None
            time.sleep(0.1)
        return self.failure(f"not ready after {timeout} s")

    def _answers(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http}{path}", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def ready_models(self) -> set[str]:
        """The names its repository index shows READY."""
        request = urllib.request.Request(f"http://{self.http}/v2/repository/index",
                                         data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return {m["name"] for m in json.load(answer) if m.get("state") == "READY"}
        except (urllib.error.URLError, OSError, ValueError):
            return set()

    def substitutions(self) -> dict[str, str]:
        """The docs' default addresses -> this server's."""
        ports = (self.http_port, self.grpc_port, self.metrics_port)
        return {f"{host}:{doc}": f"127.0.0.1:{port}" for doc, port in zip(DEFAULT_PORTS, ports)
                for host in ("127.0.0.1", "localhost")}


def start_nats(command: Command, root: Path, log: Path, store: Path,
               port: int) -> tuple[Process, str]:
    """A documented nats-server on `port`: (process, the port the docs gave it)."""
    argv = program_args(command)[1]
    documented = flag_value(argv, "-p") or flag_value(argv, "--port") or "4222"
    argv = set_flag(set_flag(argv, "-p", str(port)), "-sd", str(store))
    return Process(command, [nats_server_path(), *argv], root, log), documented


def wait_listening(process: Process, port: int, timeout: float = 20.0) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.proc.poll() is not None:
            return process.failure(f"exited with status {process.proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return None
        except OSError:
            time.sleep(0.05)
    return process.failure(f"not listening after {timeout} s")


def substitute(text: str, substitutions: dict[str, str]) -> str:
    for old, new in substitutions.items():
        text = text.replace(old, new)
    return text


def run_curl(command: Command, root: Path, substitutions: dict[str, str]) -> Outcome:
    argv = [substitute(word, substitutions) for word in command.argv] + ["--fail", "-sS"]
    try:
        done = subprocess.run(argv, cwd=root, capture_output=True, text=True,
                              timeout=CLIENT_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as err:
        return Outcome(False, f"{' '.join(argv)}: {err}")
    said = f"{' '.join(argv)}\nstatus {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    ok = done.returncode == 0 and bool(done.stdout.strip()) and '"error"' not in done.stdout
    return Outcome(ok, said)


def run_python(code: str, root: Path, path: Path, pytest: bool) -> Outcome:
    """A snippet as a program (or, defining tests, under pytest), from the root."""
    path.write_text(code)
    argv = [sys.executable, str(path)]
    if pytest:
        (path.parent / "pytest.ini").write_text("[pytest]\n")  # not the repository's
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "--rootdir", str(path.parent), str(path)]
    try:
        done = subprocess.run(argv, cwd=root, capture_output=True, text=True,
                              timeout=CLIENT_TIMEOUT)
    except subprocess.TimeoutExpired as err:
        return Outcome(False, f"{path}: timed out: {err}")
    said = f"status {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return Outcome(done.returncode == 0, said)


def wait_all(servers: list[DocServer]) -> dict[DocServer, str | None]:
    with concurrent.futures.ThreadPoolExecutor(max(len(servers), 1)) as pool:
        return dict(zip(servers, pool.map(lambda s: s.wait_ready(), servers)))


def stop_all(processes: list[Process]) -> dict[Process, int]:
    with concurrent.futures.ThreadPoolExecutor(max(len(processes), 1)) as pool:
        return dict(zip(processes, pool.map(lambda p: p.stop(), processes)))


