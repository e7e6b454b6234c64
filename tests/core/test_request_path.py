"""The request path between parent and stub: the parent's bounded watch for a reply
(ModelInstance.watch_for_reply), a request announced to an idle stub before it is sent
(Hop.announce, latency/hop.py) and a request queued in an instance's stub behind the
running one (ModelInstance.can_queue_another). Answers come back right every way, a
killed stub still costs only its running request, and a queued request cancelled before
it starts never runs."""

from __future__ import annotations

import os
import re
import signal
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from pbserve.core.latency import hop as hop_module
from pbserve.core.latency.hop import QUEUE_AHEAD_MAX_HOP_NS, REPLY_WATCH_NS
from pbserve.core.instances.stub_process import StubProcess
from pbserve.errors import ServerError
from pbserve.testing import load_models, running_server
from client_inputs import http_input
from polling import wait_for

MODELS = Path(__file__).resolve().parents[1] / "models"


def sleep_ms(ms: int) -> dict:
    return {"SLEEP_MS": np.array([ms], np.int32)}


def test_every_way_an_answer_comes_back_leaves_no_instance_counted_busy():
    assert REPLY_WATCH_NS < 5_000_000  # the slow request below outlasts the watch
    with load_models(MODELS, models=["sleepy"]) as models:
        pid = int(models.infer("sleepy", sleep_ms(0))["PID"][0])
        for _ in range(50):  # idle server, fast model: read by the watch
            assert int(models.infer("sleepy", sleep_ms(0))["PID"][0]) == pid
        assert int(models.infer("sleepy", sleep_ms(5))["PID"][0]) == pid  # by the doorbell

        results: list = []
        threads = [threading.Thread(target=lambda: results.append(
            models.infer("sleepy", sleep_ms(1)))) for _ in range(6)]
        for t in threads:  # several at once: all but the first wait in the queue
            t.start()
        for t in threads:
            t.join(30)
        assert [int(r["PID"][0]) for r in results] == [pid] * 6

        with pytest.raises(Exception, match="sleep length must be non-negative"):
            models.infer("sleepy", sleep_ms(-1))  # execute raises

        killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
        killer.start()
        with pytest.raises(Exception, match="exited with signal 9"):
            models.infer("sleepy", sleep_ms(3000))
        killer.join()
        restarted = int(models.infer("sleepy", sleep_ms(0))["PID"][0])
        assert restarted != pid
        assert models.manager._running.count == 0


class _Machine:
    def __init__(self, spare: bool) -> None:
        self.value = spare

    def spare(self) -> bool:
        return self.value


def _on_loop(models, *calls) -> None:
    """Run the calls back to back in one turn of the backend's loop."""
    async def run() -> None:
        for call in calls:
            call()
    models._run(run())


def test_an_announced_request_wakes_its_idle_stub_once_and_only_while_cpu_is_spare(
        monkeypatch):
    announced: list[int] = []
    announce = StubProcess.announce

    def counted(self: StubProcess) -> None:
        announced.append(self.pid)
        announce(self)

    machine = _Machine(spare=True)
    monkeypatch.setattr(StubProcess, "announce", counted)
    monkeypatch.setattr(hop_module, "MACHINE", machine)
    monkeypatch.setattr(hop_module, "EXPECT_EVERY_NS", 10**12)
    with load_models(MODELS, models=["sleepy"]) as models:
        def expect(name: str, version: str = "") -> None:
            try:  # as a frontend: an unknown model is the request's error, no hint
                handle = models.manager.model_handle(name, version)
            except ServerError:
                return
            handle.expect()
        pid = int(models.infer("sleepy", sleep_ms(0))["PID"][0])
        _on_loop(models, lambda: expect("sleepy"), lambda: expect("sleepy"),
                 lambda: expect("sleepy", "1"))
        assert announced == [pid]  # once, however many hints
        assert int(models.infer("sleepy", sleep_ms(0))["PID"][0]) == pid

        monkeypatch.setattr(hop_module, "EXPECT_EVERY_NS", 0)
        _on_loop(models, lambda: expect("sleepy"))  # a hint no request follows:
        assert announced == [pid, pid]
        for _ in range(20):  # the stub polls for a while, then sleeps; all answered
            assert int(models.infer("sleepy", sleep_ms(0))["PID"][0]) == pid
        for _ in range(30):  # announced back to back: the stub also polls after each
            _on_loop(models, lambda: expect("sleepy"))  # answer for the next one
            assert int(models.infer("sleepy", sleep_ms(0))["PID"][0]) == pid
        assert len(announced) == 32
        del announced[2:]

        _on_loop(models, lambda: expect("no_such_model"), lambda: expect("sleepy", "9"))
        machine.value = False
        _on_loop(models, lambda: expect("sleepy"))
        assert announced == [pid, pid]  # unknown models are no error; busy CPUs no hint

        machine.value = True
        results: list = []
        running = _infer_in_thread(models, 500, results)
        wait_for(lambda: models.manager.model("sleepy").instances[0].busy, "sleepy busy")
        _on_loop(models, lambda: expect("sleepy"))
        running.join(30)
        assert announced == [pid, pid]  # a request in flight: nothing to get ready for
        assert int(results[0]["PID"][0]) == pid


def _queued_ahead(models) -> int:
    """Batches the sleepy instance has sent to its stub and not had answered."""
    instance = models.manager.model("sleepy").instances[0]
    return len(instance._batches)


def _infer_in_thread(models, ms: int, results: list, **kwargs) -> threading.Thread:
    def run() -> None:
        try:
            results.append(models.infer("sleepy", sleep_ms(ms), **kwargs))
        except Exception as exc:  # noqa: BLE001 - the test reads it
            results.append(exc)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def pending_requests(server) -> int:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as reply:
        text = reply.read().decode()
    found = re.search(r'nv_inference_pending_request_count{model="sleepy",version="1"} (\d+)',
                      text)
    return int(found.group(1)) if found else 0


def test_a_killed_stub_costs_only_its_running_request_not_the_one_queued_behind_it():
    with load_models(MODELS, models=["sleepy"]) as models:
        instance = models.manager.model("sleepy").instances[0]

        def short_hops() -> bool:  # then the instance may queue a request ahead
            models.infer("sleepy", sleep_ms(0))
            return instance.hop.hop_ns < QUEUE_AHEAD_MAX_HOP_NS
        wait_for(short_hops, "the instance's hops to be short (a loaded machine)")
        pid = int(models.infer("sleepy", sleep_ms(0))["PID"][0])
        running: list = []
        behind: list = []
        t1 = _infer_in_thread(models, 3000, running)
        wait_for(lambda: _queued_ahead(models) == 1, "the first request running")
        t2 = _infer_in_thread(models, 0, behind)
        wait_for(lambda: _queued_ahead(models) == 2, "the second queued in the stub")
        os.kill(pid, signal.SIGKILL)
        t1.join(30)
        t2.join(30)
        assert "exited with signal 9" in str(running[0])
        assert int(behind[0]["PID"][0]) not in (pid, 0)  # answered by the new stub
        assert models.manager._running.count == 0


def test_a_request_whose_timeout_passes_while_queued_in_the_stub_is_not_executed():
    """Over HTTP: the second request waits in the stub's queue behind a 1 s one and its
    200 ms timeout passes there. It is dropped before `execute` (sleepy ignores
    cancellation: had it run, it would answer a PID). Waiting in the scheduler's queue
    instead, it would get "Request timeout expired". As in Triton, a request dropped
    before `execute` counts no execution in the model's statistics."""
    with running_server(MODELS, args=["--model-control-mode", "explicit",
                                      "--load-model", "sleepy"]) as server:
        client = server.http_client(concurrency=2)
        for _ in range(50):  # short hops: the instance may queue a request ahead
            client.infer("sleepy", [http_input("SLEEP_MS", np.array([0], np.int32))])
        executions = lambda: int(client.get_inference_statistics("sleepy")[  # noqa: E731
            "model_stats"][0]["execution_count"])
        before = executions()
        first = client.async_infer("sleepy", [http_input("SLEEP_MS", np.array([1000], np.int32))])
        # Submitted is running: the instance was idle, so it was sent at once.
        wait_for(lambda: pending_requests(server) == 1, "the first request to run")
        with pytest.raises(InferenceServerException, match="request for model 'sleepy' was cancelled"):
            client.infer("sleepy", [http_input("SLEEP_MS", np.array([0], np.int32))],
                         timeout=200_000)
        assert first.get_result().as_numpy("PID")[0] > 0
        assert executions() == before + 1


def test_an_instance_waiting_on_its_bls_call_is_not_counted_as_computing(monkeypatch):
    """While a stub's main thread waits for a BLS answer (CALL_DIRECT) its instance runs
    a batch but takes no CPU: the parent still watches for the callee's reply (one
    instance computes), and for the caller's next message once it has its answer. The
    count comes back to zero every way a call ends, a killed caller included."""
    watched: list[str] = []
    watch_up = StubProcess.watch_up

    def recorded(self, budget_ns: int) -> None:
        watched.append(self.instance_name)
        watch_up(self, budget_ns)

    monkeypatch.setattr(StubProcess, "watch_up", recorded)
    with load_models(MODELS, models=["bls_to_sleepy", "sleepy"]) as models:
        running = models.manager._running
        for _ in range(5):
            models.infer("bls_to_sleepy", sleep_ms(0))
        assert any(name.startswith("sleepy") for name in watched)  # the callee's reply
        assert any(name.startswith("bls_to_sleepy") for name in watched)  # after it
        assert (running.count, running.waiting) == (0, 0)

        caller = models.manager.model("bls_to_sleepy", "").instances[0]
        failed: list[Exception] = []

        def call() -> None:
            try:
                models.infer("bls_to_sleepy", sleep_ms(2000))  # the kill comes first
            except Exception as exc:  # noqa: BLE001 - the test looks at it
                failed.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        wait_for(lambda: running.waiting == 1, "the caller waiting on its BLS call")
        assert running.count == 2 and running.computing == 1
        os.kill(caller.pid, signal.SIGKILL)
        thread.join(30)
        assert failed and "exited with signal 9" in str(failed[0])
        wait_for(lambda: running.count == 0, "sleepy's call to end", 10)
        assert running.waiting == 0
