"""Stubs forked by the stub zygote (the default) see the process a plain `python -m stub`
saw: each property is probed in a stub of each way and compared (--stub-zygote false is
the plain way)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from client_inputs import http_input
from pbserve.secret_env import PLANE_TOKEN_ENV
from pbserve.testing import RunningServer, load_models, running_server, stub_pids
from polling import wait_for

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "REPORT" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}
"""
PROBE = '''
import ctypes, json, os, signal, sys
import numpy as np
import triton_python_backend_utils as pb_utils

AT_IMPORT = {"argv": list(sys.argv), "path": list(sys.path)}


def fds():
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            found.append((fd, target, os.get_inheritable(fd)))
        except OSError:
            pass  # the listing's own
    return found


def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return line.split()[1]


class TritonPythonModel:
    def initialize(self, args):
        self.at_init = {"argv": list(sys.argv), "path": list(sys.path)}

    def execute(self, requests):
        sig = ctypes.c_int(0)
        ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
        raw_env = open("/proc/self/environ", "rb").read().split(b"\\0")
        report = {
            "pid": os.getpid(), "ppid": os.getppid(), "at_import": AT_IMPORT,
            "at_init": self.at_init, "argv": list(sys.argv), "path": list(sys.path),
            "main": sys.modules["__main__"].__spec__.name,
            "env": dict(os.environ),
            "proc_env": sorted(e.decode() for e in raw_env if e),
            "sig": {f: status(f) for f in ("SigBlk", "SigIgn", "SigCgt")},
            "handlers": {n: repr(signal.getsignal(getattr(signal, n)))
                         for n in ("SIGINT", "SIGTERM", "SIGCHLD", "SIGPIPE")},
            "pdeathsig": sig.value, "fds": fds(), "cwd": os.getcwd(),
            "threads": len(os.listdir("/proc/self/task")),
            "cmdline": open("/proc/self/cmdline", "rb").read().decode().split("\\0"),
        }
        out = pb_utils.Tensor("REPORT", np.array([json.dumps(report).encode()], np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
'''


def probe_repo(tmp_path: Path, names=("probe_a", "probe_b"), extra: str = "") -> Path:
    repo = tmp_path / "repo"
    for name in names:
        version = repo / name / "1"
        version.mkdir(parents=True)
        (version.parent / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
        (version / "model.py").write_text(PROBE)
    return repo


def report(server, name: str = "probe_a") -> dict:
    result = server.http_client().infer(name, [http_input("X", np.array([0], np.int32))])
    return json.loads(result.as_numpy("REPORT")[0])


def zygotes(server_pid: int) -> list[int]:
    with open(f"/proc/{server_pid}/task/{server_pid}/children") as f:
        children = [int(p) for p in f.read().split()]
    return [p for p in children
            if b"stub.zygote" in Path(f"/proc/{p}/cmdline").read_bytes()]


def _no_addresses(handlers: dict) -> dict:
    return {k: re.sub(r" at 0x[0-9a-f]+", "", v) for k, v in handlers.items()}


def fd_kinds(fds: list) -> list:
    """The fds 3 and up by kind, their numbers and ids left out."""
    kinds = []
    for fd, target, inheritable in fds:
        if fd > 2:
            kind = re.sub(r"\[\d+\]|/pbserve-[0-9a-f-]+", "", target)
            kinds.append((kind, inheritable))
    return sorted(kinds)


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    """The probe's report in a zygote's stub and in a plain one."""
    tmp_path = tmp_path_factory.mktemp("probe")
    repo = probe_repo(tmp_path)
    found = {}
    for way in ("zygote", "plain"):
        args = ["--stub-zygote", "true" if way == "zygote" else "false"]
        env = {"PBSERVE_TEST_MARKER": "kept"}
        server = RunningServer([repo], args, tmp_path / f"{way}.log", env=env)
        try:
            server.wait_ready()
            found[way] = report(server)
            found[way]["server_pid"] = server.pid
            found[way]["zygotes"] = zygotes(server.pid)
            found[way]["zygote_threads"] = [len(os.listdir(f"/proc/{z}/task"))
                                            for z in found[way]["zygotes"]]
            found[way]["stubs"] = stub_pids(server.pid)
        finally:
            server.stop()
    return found


def test_a_zygote_forks_the_stubs_and_holds_no_thread(reports):
    zygote, plain = reports["zygote"], reports["plain"]
    assert len(zygote["zygotes"]) == 1 and zygote["zygote_threads"] == [1]
    assert zygote["ppid"] == zygote["zygotes"][0]
    assert len(zygote["stubs"]) == 2 and zygote["pid"] in zygote["stubs"]
    assert plain["zygotes"] == [] and plain["ppid"] == plain["server_pid"]
    assert len(plain["stubs"]) == 2


def test_argv_and_the_import_path_are_those_of_a_plain_stub(reports):
    zygote, plain = reports["zygote"], reports["plain"]
    for key in ("argv", "at_import", "at_init", "path", "main", "cwd"):
        assert zygote[key] == plain[key], key
    assert zygote["argv"] == [""]
    assert zygote["main"] == "stub.__main__"  # `python -m stub`'s


def test_ps_shows_a_forked_stub_by_its_own_command_line(reports):
    command = [a for a in reports["zygote"]["cmdline"] if a]
    assert command[1:3] == ["-m", "stub"]
    assert command[command.index("--name") + 1] == "probe_a_0_0"
    plain = [a for a in reports["plain"]["cmdline"] if a]
    assert sorted(command[3:]) != [] and len(command) == len(plain)


def test_the_environment_is_the_same(reports):
    zygote, plain = reports["zygote"], reports["plain"]
    assert zygote["env"] == plain["env"]
    assert zygote["proc_env"] == plain["proc_env"]
    assert zygote["env"]["PBSERVE_TEST_MARKER"] == "kept"


def test_the_servers_secrets_are_kept_from_a_forked_stub(tmp_path, monkeypatch):
    """A secret in the server's environment (its plane token; a server takes it only with
    a plane, so here the backend runs in this process) reaches neither the zygote nor the
    stub, in os.environ or in /proc/PID/environ."""
    monkeypatch.setenv(PLANE_TOKEN_ENV, "sekrit")
    monkeypatch.setenv("PBSERVE_TEST_MARKER", "kept")
    with load_models(probe_repo(tmp_path, names=("probe_a",))) as models:
        found = json.loads(models.infer("probe_a", {"X": np.array([0], np.int32)})
                           ["REPORT"][0])
        zygote_env = Path(f"/proc/{found['ppid']}/environ").read_bytes()
    assert found["ppid"] != os.getpid()  # forked by a zygote
    assert found["env"]["PBSERVE_TEST_MARKER"] == "kept"
    assert PLANE_TOKEN_ENV not in found["env"]
    assert not any(e.startswith(PLANE_TOKEN_ENV) for e in found["proc_env"])
    assert b"sekrit" not in zygote_env


def test_signal_dispositions_and_the_parent_death_signal_are_the_same(reports):
    zygote, plain = reports["zygote"], reports["plain"]
    assert zygote["sig"] == plain["sig"]
    assert zygote["sig"]["SigBlk"] == "0000000000000000"
    assert _no_addresses(zygote["handlers"]) == _no_addresses(plain["handlers"])
    assert "_ignore" in zygote["handlers"]["SIGTERM"]
    assert zygote["handlers"]["SIGCHLD"] == repr(signal.SIG_DFL)
    assert zygote["pdeathsig"] == plain["pdeathsig"] == signal.SIGKILL


def test_no_fd_of_the_server_the_zygote_or_another_stub_leaks_into_a_stub(reports):
    zygote, plain = reports["zygote"], reports["plain"]
    assert fd_kinds(zygote["fds"]) == fd_kinds(plain["fds"])
    standard = [[(fd, re.sub(r"\[\d+\]", "", target), inheritable)
                 for fd, target, inheritable in reports[way]["fds"] if fd <= 2]
                for way in ("zygote", "plain")]
    assert standard[0] == standard[1]
    # stdin /dev/null; stdout and stderr two pipes of the stub's own (to the log)
    assert [target for _, target, _ in standard[0]] == ["/dev/null", "pipe:", "pipe:"]
    for way in ("zygote", "plain"):
        pipes = {target for fd, target, _ in reports[way]["fds"] if fd in (1, 2)}
        assert len(pipes) == 2, way
    # the doorbell is the one eventfd, and no socket (the zygote's) is there
    assert [k for k, _ in fd_kinds(zygote["fds"])].count("anon_inode:[eventfd]") == 1
    assert not any("socket" in k or "pipe" in k for k, _ in fd_kinds(zygote["fds"]))


PRINTER = """
import os, sys
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        print("hello from", args["model_instance_name"], "pid", os.getpid())
        print("to stderr from", args["model_instance_name"], file=sys.stderr)

    def execute(self, requests):
        out = pb_utils.Tensor("REPORT", np.array([str(os.getppid()).encode()], np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""


def test_a_forked_stubs_print_reaches_the_log_with_the_instance_name(tmp_path):
    """A forked stub's fds 1 and 2 are its own pipes (sent to the zygote with the
    doorbell): each instance's lines are logged under its name, stdout at INFO and
    stderr at WARNING, and no line of one stub is logged under another's name."""
    repo = probe_repo(tmp_path, names=("printer",))
    (repo / "printer" / "config.pbtxt").write_text(
        CONFIG.format(name="printer", extra="").replace("count: 1", "count: 2"))
    (repo / "printer" / "1" / "model.py").write_text(PRINTER)
    with running_server(repo, log_path=tmp_path / "log") as server:
        x = http_input("X", np.array([0], np.int32))
        ppid = int(server.http_client().infer("printer", [x]).as_numpy("REPORT")[0])
        assert ppid == zygotes(server.pid)[0]  # forked by the zygote
        stubs = stub_pids(server.pid)
        wait_for(lambda: server.log_text().count("] to stderr from printer_0_") == 2,
                 "both stubs' lines in the log")
        lines = server.log_text().splitlines()
    printed = {}
    for line in lines:
        found = re.search(r"pbserve\.stub (printer_0_\d)\] hello from (\S+) pid (\d+)$",
                          line)
        if found:
            assert line.startswith("I") and found[1] == found[2]
            printed[found[1]] = int(found[3])
    assert sorted(printed) == ["printer_0_0", "printer_0_1"]
    assert sorted(printed.values()) == sorted(stubs)
    for name in printed:
        assert any(line.startswith("W") and line.endswith(
            f"pbserve.stub {name}] to stderr from {name}") for line in lines)


def test_a_crashed_stub_is_restarted_from_the_zygote(tmp_path):
    repo = probe_repo(tmp_path, names=("probe_a",))
    with running_server(repo, log_path=tmp_path / "log") as server:
        first = report(server)
        os.kill(first["pid"], signal.SIGKILL)
        wait_for(lambda: "exited with signal 9" in server.log_text(), "the crash logged")
        wait_for(lambda: server.http_client().is_model_ready("probe_a"), "the restart")
        second = report(server)
        assert second["pid"] != first["pid"]
        assert second["ppid"] == first["ppid"] == zygotes(server.pid)[0]


def test_a_killed_zygote_takes_its_stubs_and_a_new_one_starts_them_again(tmp_path):
    repo = probe_repo(tmp_path)
    with running_server(repo, log_path=tmp_path / "log") as server:
        before = [report(server, n) for n in ("probe_a", "probe_b")]
        [zygote] = zygotes(server.pid)
        os.kill(zygote, signal.SIGKILL)
        for probe in before:
            wait_for(lambda: not os.path.exists(f"/proc/{probe['pid']}"), "the stub to go")
        wait_for(lambda: all(server.http_client().is_model_ready(n)
                             for n in ("probe_a", "probe_b")), "the restarts", 60)
        after = [report(server, n) for n in ("probe_a", "probe_b")]
        [new_zygote] = zygotes(server.pid)
        assert new_zygote != zygote
        assert all(a["ppid"] == new_zygote for a in after)


def test_a_killed_server_takes_the_zygote_and_its_stubs(tmp_path):
    repo = probe_repo(tmp_path)
    server = RunningServer([repo], log_path=tmp_path / "log")
    try:
        server.wait_ready()
        stubs = stub_pids(server.pid)
        family = [*zygotes(server.pid), *stubs]
        assert len(stubs) == 2 and len(family) == 3
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait(10)
        wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in family),
                 "the zygote and the stubs to end with the server", timeout_s=10)
    finally:
        server.stop()
    with running_server(repo, log_path=tmp_path / "next.log"):
        pass  # removes what the killed one left in /dev/shm


def _interpreter(tmp_path: Path, name: str, refuse_zygote: bool = False) -> Path:
    env = tmp_path / name
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"
    guard = 'case "$2" in stub.zygote) exit 3;; esac\n' if refuse_zygote else ""
    python.write_text(f'#!/bin/sh\n{guard}exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return env


def test_a_model_with_its_own_environment_gets_a_zygote_of_its_own(tmp_path):
    env = _interpreter(tmp_path, "env")
    repo = probe_repo(tmp_path, names=("probe_a",))
    extra = 'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "%s" } }' % env
    version = tmp_path / "repo" / "probe_b" / "1"
    version.mkdir(parents=True)
    (version.parent / "config.pbtxt").write_text(CONFIG.format(name="probe_b", extra=extra))
    (version / "model.py").write_text(PROBE)
    with running_server(repo, log_path=tmp_path / "log") as server:
        a, b = report(server, "probe_a"), report(server, "probe_b")
        found = zygotes(server.pid)
        assert len(found) == 2 and a["ppid"] != b["ppid"]
        assert {a["ppid"], b["ppid"]} == set(found)


def test_an_interpreter_that_cannot_run_a_zygote_starts_its_stubs_the_plain_way(tmp_path):
    env = _interpreter(tmp_path, "env", refuse_zygote=True)
    repo = probe_repo(tmp_path, names=("probe_a",), extra=(
        'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "%s" } }' % env))
    with running_server(repo, log_path=tmp_path / "log") as server:
        probe = report(server)
        assert probe["ppid"] == server.pid
        assert "could not start (it exited with status 3)" in server.log_text()
        assert "plain way" in server.log_text()


def _context_switches(pid: int) -> int:
    """Voluntary and involuntary, of every thread of `pid`."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
            if "ctxt_switches:" in line:
                total += int(line.split()[1])
    return total


def test_idle_stubs_and_their_zygote_do_not_wake_up(tmp_path):
    """No polling per stub when nothing happens: an idle stub (and the zygote) makes no
    context switch in 2 s (each stub used to wake four times a second)."""
    repo = probe_repo(tmp_path)
    with running_server(repo, log_path=tmp_path / "log") as server:
        report(server, "probe_a")
        report(server, "probe_b")
        watched = [*stub_pids(server.pid), *zygotes(server.pid)]
        assert len(watched) == 3
        time.sleep(1.0)  # the requests' after-effects: polls, a trim
        before = [_context_switches(p) for p in watched]
        time.sleep(2.0)
        assert [_context_switches(p) for p in watched] == before
