"""Shutting down: a signal to the server's whole process group (systemd, `timeout`,
`kill -- -PGID`) is a clean shutdown, not a crash of its stubs."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from child_process import run_py
from client_inputs import grpc_input, http_input
from pbserve.testing import RunningServer
from polling import wait_for
from shm.names import entries_with_prefix

TEST_MODELS = Path(__file__).resolve().parents[1] / "models"


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


# -- --exit-timeout-secs ------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"


def shutdown_repo(tmp_path: Path) -> Path:
    repo = sleepy_repo(tmp_path)
    shutil.copytree(EXAMPLES / "repeat", repo / "repeat")
    return repo


class SseStream:
    """POST generate_stream on `repeat` from a thread; the events and how it ended."""

    def __init__(self, server: RunningServer, count: int, delay_ms: int) -> None:
        self.events: list[dict] = []
        self.ended_cleanly = False
        self.failure: Exception | None = None
        body = json.dumps({"IN": list(range(count)), "DELAY": delay_ms})
        self._thread = threading.Thread(target=self._read, args=(server.http_url, body))
        self._thread.start()

    def _read(self, url: str, body: str) -> None:
        connection = http.client.HTTPConnection(url, timeout=60)
        try:
            connection.request("POST", "/v2/models/repeat/generate_stream", body)
            reply = connection.getresponse()
            for line in reply:  # chunked: ends at the terminating chunk
                if line.startswith(b"data: "):
                    self.events.append(json.loads(line[6:]))
            self.ended_cleanly = True
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            self.failure = exc
        finally:
            connection.close()

    def join(self) -> None:
        self._thread.join(30)


class GrpcStream:
    """A gRPC ModelStreamInfer call on `repeat`; the responses and errors it got."""

    def __init__(self, server: RunningServer) -> None:
        self.results: list = []
        self.errors: list = []
        self.done = threading.Event()
        self.client = server.grpc_client()
        self.client.start_stream(callback=self._on)

    def _on(self, result, error) -> None:
        if error is not None:
            self.errors.append(error)
            if "StatusCode" in str(error.status()):  # the call itself ended
                self.done.set()
        else:
            self.results.append(result)

    def send(self, count: int, delay_ms: int, request_id: str) -> None:
        self.client.async_stream_infer("repeat", [
            grpc_input("IN", np.arange(count, dtype=np.int32)),
            grpc_input("DELAY", np.array([delay_ms], np.uint32))], request_id=request_id)

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def test_what_outlasts_the_exit_timeout_ends_with_an_error_each_client_understands(tmp_path):
    server = RunningServer([shutdown_repo(tmp_path)], log_path=tmp_path / "log",
                           args=["--exit-timeout-secs", "1"])
    unary: list = []
    grpc_unary: list = []
    try:
        server.wait_ready()
        running = call_sleepy(server, 20000, unary)  # runs far beyond the exit timeout
        wait_for(lambda: pending(server) == 1, "the sleepy request to run")

        def grpc_call() -> None:
            try:
                server.grpc_client().infer(
                    "sleepy", [grpc_input("SLEEP_MS", np.array([0], np.int32))])
            except Exception as exc:  # noqa: BLE001
                grpc_unary.append(exc)
        queued = threading.Thread(target=grpc_call)
        queued.start()
        wait_for(lambda: pending(server) == 2, "the gRPC request to queue")
        sse = SseStream(server, count=100, delay_ms=200)
        stream = GrpcStream(server)
        stream.send(100, 200, "long")
        wait_for(lambda: sse.events and stream.results, "both streams to deliver")

        os.killpg(server.pid, signal.SIGTERM)
        for thread in (running, queued):
            thread.join(30)
        sse.join()
        assert stream.done.wait(30), "the gRPC stream did not end"
        stream.close()
        assert server.proc.wait(30) == 0
    finally:
        server.stop()
    for error in (unary[0], grpc_unary[0], stream.errors[0]):
        assert "exit timeout" in error.message(), error
    assert unary[0].status() == "503"
    assert grpc_unary[0].status() == "StatusCode.UNAVAILABLE"
    assert sse.ended_cleanly and "exit timeout" in sse.events[-1]["error"], sse.events[-3:]
    assert 0 < len(sse.events) - 1 < 100
    assert stream.errors[-1].status() == "StatusCode.UNAVAILABLE"
    assert 0 < len(stream.results) < 100
    log = server.log_text()
    assert "4 request(s) still in flight after the exit timeout" in log, log
    assert "Traceback" not in log, log


def test_streams_in_flight_finish_within_the_exit_timeout_then_the_stream_ends(tmp_path):
    server = RunningServer([shutdown_repo(tmp_path)], log_path=tmp_path / "log")
    try:
        server.wait_ready()
        sse = SseStream(server, count=5, delay_ms=200)
        stream = GrpcStream(server)
        stream.send(5, 200, "short")
        wait_for(lambda: sse.events and stream.results, "both streams to deliver")
        os.killpg(server.pid, signal.SIGTERM)
        sse.join()
        assert stream.done.wait(30), "the gRPC stream did not end"
        stream.close()
        assert server.proc.wait(30) == 0
    finally:
        server.stop()
    assert sse.ended_cleanly and [e["OUT"] for e in sse.events] == list(range(5))
    assert [int(r.as_numpy("OUT")[0]) for r in stream.results] == list(range(5))
    # The client kept its stream open: it ends with a status once its requests answered.
    assert len(stream.errors) == 1 and stream.errors[0].status() == "StatusCode.UNAVAILABLE"
    assert "shutting down" in stream.errors[0].message()
    assert "still in flight" not in server.log_text()


STUB_SIGNALS = r"""
import os, signal, subprocess, sys, time
from stub.signals import ignore_shutdown_signals

ignore_shutdown_signals()
os.kill(os.getpid(), signal.SIGTERM)
os.kill(os.getpid(), signal.SIGINT)
time.sleep(0.05)  # (a handler runs between bytecodes)
pid = os.fork()
if pid == 0:  # as multiprocessing's workers: the defaults are back
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
started = subprocess.run([sys.executable, "-c",
                          "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
assert started.returncode == -signal.SIGTERM, started.returncode
print("alive")
"""


def test_a_stub_ignores_shutdown_signals_but_what_the_model_starts_does_not():
    assert run_py(STUB_SIGNALS).strip() == "alive"


def test_a_task_that_ignores_cancellation_does_not_keep_the_server_from_exiting(
        monkeypatch, caplog):
    """pbserve/app.py: what is left on the loop after `serve` gets a bounded wait (a
    library task that swallows its cancellation once kept a worker alive for good)."""
    import asyncio
    import time

    from pbserve import app

    monkeypatch.setattr(app, "LEFTOVER_TASKS_S", 0.2)

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(stubborn())
        loop.run_until_complete(asyncio.sleep(0))
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="pbserve"):
            app._end_leftover_tasks(loop)
        assert time.monotonic() - started < 5
        assert not task.done()
        assert "did not end within" in caplog.text
    finally:
        loop.close()
