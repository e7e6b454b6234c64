"""Ctrl-C as a user gives it (issue 40): the first signal starts a clean shutdown whose
drain says what it waits for each second; a second one ends the server at once, its
stubs and its shared memory with it; a shutdown that hangs is ended by its deadline; a
NATS frontend and its worker stopped together both exit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pbserve.testing import RunningServer, running_nats, stub_pids
from polling import wait_for
from shm.names import SHM_DIR, entries_with_prefix
from test_shutdown import call_sleepy, pending, sleepy_repo

ROOT = Path(__file__).resolve().parents[2]


def _owned_entries(pid: int) -> list[str]:
    """The /dev/shm names and lock file of server `pid`."""
    return entries_with_prefix(f"/pbserve-{pid}-")


def test_a_second_signal_ends_the_server_at_once(tmp_path):
    server = RunningServer([sleepy_repo(tmp_path)], log_path=tmp_path / "log")
    results: list = []
    try:
        server.wait_ready()
        stubs = stub_pids(server.pid)
        running = call_sleepy(server, 120_000, results)  # runs far past the exit timeout
        wait_for(lambda: pending(server) == 1, "the request to run")
        os.kill(server.pid, signal.SIGINT)
        wait_for(lambda: "a second Ctrl-C or SIGTERM exits at once" in server.log_text(),
                 "the first signal's log line")
        # the drain says what it waits for, each second, in tritonserver's words
        wait_for(lambda: re.search(r"Timeout \d+: Found 1 in-flight inference requests",
                                   server.log_text()), "the drain's report")
        assert server.proc.poll() is None  # the clean shutdown waits for the request
        os.kill(server.pid, signal.SIGINT)
        assert server.proc.wait(30) == 1
        running.join(30)
    finally:
        server.stop()
    assert len(results) == 1 and isinstance(results[0], Exception)  # not answered
    assert "SIGINT received again during the shutdown: exiting now" in server.log_text()
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in stubs), "stubs to end")
    assert _owned_entries(server.pid) == []


WATCHED = """
import asyncio, logging, os, signal
import posix_ipc
from shm.names import new_prefix
from pbserve.exit_signals import ShutdownSignals

logging.basicConfig(level=logging.INFO)
NAME = new_prefix() + "-probe"

async def main():
    posix_ipc.SharedMemory(NAME, posix_ipc.O_CREX, size=4096).close_fd()
    print(NAME, flush=True)
    signals = ShutdownSignals(asyncio.get_running_loop(), deadline_s=0.5)
    signals.install()
    os.kill(os.getpid(), signal.SIGTERM)
    await signals.received.wait()
    await asyncio.Event().wait()  # a shutdown step that never ends

asyncio.run(main())
"""


def test_a_shutdown_that_hangs_is_ended_at_its_deadline():
    done = subprocess.run([sys.executable, "-c", WATCHED], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "the shutdown did not end within 0.5 s: exiting now" in done.stderr
    name = done.stdout.split()[0].lstrip("/")
    assert not os.path.exists(os.path.join(SHM_DIR, name))  # its shared memory went
    pid = int(name.split("-")[1])
    assert _owned_entries(pid) == []  # and its lock file


# -- a NATS frontend and its worker, stopped together ----------------------------------

# The check is 20 rounds in a row: PBSERVE_STOP_ROUNDS=20 python -m pytest
# tests/app/test_exit_signals.py -k together (bench/results/plane_stop_*.txt); 3 in the suite.
ROUNDS = int(os.environ.get("PBSERVE_STOP_ROUNDS", "3"))
EXIT_TIMEOUT_S = 5


def test_a_frontend_and_its_worker_stopped_together_both_exit(tmp_path):
    """As Ctrl-C to a process group does (or `kill -INT $F $W`): the worker deletes its
    registry entries while the frontend stops following them."""
    repo = tmp_path / "repo"
    (repo / "identity" / "1").mkdir(parents=True)
    for name in ("config.pbtxt", "1/model.py"):
        source = ROOT / "models/examples/identity" / name
        (repo / "identity" / name).write_text(source.read_text())
    temp = tmp_path / "tmp"  # the servers' own temp dir: what they leave there shows
    temp.mkdir()
    env = {"TMPDIR": str(temp)}
    flags = ["--exit-timeout-secs", str(EXIT_TIMEOUT_S)]
    with running_nats(tmp_path / "nats.log") as nats:
        for round_ in range(ROUNDS):
            plane = ["--request-plane", nats.url, *flags]
            worker = RunningServer([repo], args=[*plane, "--worker-name", "w"],
                                   log_path=tmp_path / f"worker{round_}.log", env=env)
            frontend = RunningServer([], args=plane, env=env,
                                     log_path=tmp_path / f"frontend{round_}.log")
            try:
                worker.wait_ready()
                frontend.wait_ready()
                # the frontend follows the worker's registry entries: it serves its model
                client = frontend.http_client()
                wait_for(lambda: client.is_model_ready("identity"), "the frontend to "
                         "serve the worker's model")
                client.close()
                for server in (frontend, worker):
                    os.kill(server.pid, signal.SIGINT)
                for server in (frontend, worker):
                    try:
                        status = server.proc.wait(EXIT_TIMEOUT_S + 10)
                    except subprocess.TimeoutExpired:
                        pytest.fail(f"round {round_}: pbserve {server.pid} still runs:\n"
                                    f"{server.log_text()[-2000:]}")
                    assert status == 0, server.log_text()[-2000:]
            finally:
                frontend.stop()
                worker.stop()
            assert _owned_entries(worker.pid) == [] and _owned_entries(frontend.pid) == []
    shared = f"pbserve_stub_path_{os.getuid()}_"  # kept for this user's next servers, by design
    assert [p.name for p in temp.iterdir() if not p.name.startswith(shared)] == []


def test_the_first_signal_says_that_a_second_one_forces_the_exit(tmp_path):
    """The line a user reads at the first Ctrl-C: the drain and the exit are clean."""
    server = RunningServer([sleepy_repo(tmp_path)], log_path=tmp_path / "log")
    try:
        server.wait_ready()
    finally:
        assert server.stop() == 0
    log = server.log_text()
    assert "Signal received (SIGINT): shutting down; a second Ctrl-C" in log
    assert "exiting now" not in log

