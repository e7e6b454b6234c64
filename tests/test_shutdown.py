"""Shutting down: a signal to the server's whole process group (systemd, `timeout`,
`kill -- -PGID`) is a clean shutdown, not a crash of its stubs."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from client_inputs import http_input
from pbserve.testing import RunningServer
from polling import wait_for
from shm.names import entries_with_prefix

TEST_MODELS = Path(__file__).resolve().parent / "models"


def sleepy_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(TEST_MODELS / "sleepy", repo / "sleepy")
    return repo


def call_sleepy(server: RunningServer, ms: int, results: list) -> threading.Thread:
    """Send one sleepy request from a thread; its PID or its exception lands in results."""
    def call() -> None:
        try:
            reply = server.http_client(network_timeout=60).infer(
                "sleepy", [http_input("SLEEP_MS", np.array([ms], np.int32))])
            results.append(int(reply.as_numpy("PID")[0]))
        except Exception as exc:  # noqa: BLE001 - the test looks at what came back
            results.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    return thread


def pending(server: RunningServer) -> int:
    """Requests of sleepy the server holds (queued or running), from its metrics."""
    text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith('nv_inference_pending_request_count{model="sleepy"'):
            return int(float(line.split()[-1]))
    return 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_to_the_process_group_finishes_requests_and_finalizes(
        tmp_path, monkeypatch, sig):
    marker = tmp_path / "finalized.txt"
    monkeypatch.setenv("PBSERVE_TEST_FINALIZE_MARKER", str(marker))
    server = RunningServer([sleepy_repo(tmp_path)], log_path=tmp_path / "log")
    results: list = []
    try:
        server.wait_ready()
        running = call_sleepy(server, 1500, results)  # goes straight to the instance
        wait_for(lambda: pending(server) == 1, "the first request to run")
        queued = call_sleepy(server, 500, results)
        wait_for(lambda: pending(server) == 2, "the second request to queue")
        os.killpg(server.pid, sig)  # the server, its stubs, everything in its group
        running.join(30)
        queued.join(30)
        assert server.proc.wait(30) == 0
    finally:
        server.stop()
    pids = [r for r in results if isinstance(r, int)]
    assert len(pids) == 2, f"both requests must be answered: {results}"
    log = server.log_text()
    assert "restarting" not in log, log
    assert "exited with signal" not in log, log
    assert marker.read_text() == f"finalized {pids[0]}\n"
    assert entries_with_prefix(f"/pbserve-{server.pid}-") == []


def test_a_stub_that_dies_during_shutdown_is_not_restarted(tmp_path):
    server = RunningServer([sleepy_repo(tmp_path)], log_path=tmp_path / "log")
    results: list = []
    try:
        server.wait_ready()
        first: list = []
        call_sleepy(server, 0, first).join(30)
        stub_pid = first[0]
        running = call_sleepy(server, 3000, results)
        wait_for(lambda: pending(server) == 1, "the request to run")
        os.kill(server.pid, signal.SIGTERM)  # shutdown begins: the request may finish
        wait_for(lambda: "Signal received" in server.log_text(), "the shutdown to begin")
        os.kill(stub_pid, signal.SIGKILL)  # ... but its stub dies meanwhile
        running.join(30)
        assert server.proc.wait(30) == 0
    finally:
        server.stop()
    assert len(results) == 1 and "exited with signal 9" in results[0].message()
    log = server.log_text()
    assert "not restarted" in log, log
    assert "restarting" not in log, log
