"""The cluster under faults as they happen in use: nats-server restarted and a worker
SIGKILLed while a few clients (unary over HTTP, a decoupled model over a gRPC stream)
send requests through the frontend; and a frontend that no worker has joined yet.

Real processes throughout: the wheel's nats-server, two pbserve workers, a frontend,
tritonclient. What must hold: no request is lost (every one is answered), every failure
names its cause (UNAVAILABLE: the plane, or the worker that died), service comes back.
Recovery times are bench/soak.py's figures; here a generous deadline only.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import RunningServer, running_nats, stub_pids
from polling import wait_for
from shm.names import sweep_dead_owners
from stub_probe import sleeping_in_execute

ROOT = Path(__file__).resolve().parents[2]
PLANE_ARGS = ["--plane-heartbeat-secs", "1"]
ANSWER_WITHIN_S = 60.0  # a request not answered by then is lost


def _repository(tmp: Path) -> Path:
    repo = tmp / "repo"
    for source in (ROOT / "tests/models/sleepy", ROOT / "models/examples/repeat"):
        shutil.copytree(source, repo / source.name)
    return repo


@dataclass
class Outcome:
    sent: float
    ended: float
    error: str = ""  # "" when answered right; "lost" when never answered
    status: str = ""


@dataclass
class Load:
    """Clients in threads until `stop`: HTTP unary `sleepy` and gRPC-stream `repeat`."""
    http_url: str
    grpc_url: str
    outcomes: list[Outcome] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, unary: int = 2, streams: int = 2) -> None:
        self.threads = [threading.Thread(target=self._unary, daemon=True)
                        for _ in range(unary)]
        self.threads += [threading.Thread(target=self._stream, daemon=True)
                         for _ in range(streams)]
        for thread in self.threads:
            thread.start()

    def finish(self) -> list[Outcome]:
        self.stop.set()
        for thread in self.threads:
            thread.join(ANSWER_WITHIN_S + 10)
        assert not any(t.is_alive() for t in self.threads), "a client still waits"
        return list(self.outcomes)

    def _add(self, sent: float, error: str = "", status: str = "") -> None:
        self.outcomes.append(Outcome(sent, time.monotonic(), error, status))

    def _unary(self) -> None:
        client = httpclient.InferenceServerClient(self.http_url,
                                                  network_timeout=ANSWER_WITHIN_S)
        tensor = httpclient.InferInput("SLEEP_MS", [1], "INT32")
        tensor.set_data_from_numpy(np.array([100], np.int32))
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                client.infer("sleepy", [tensor])
                self._add(sent)
            except InferenceServerException as err:
                self._add(sent, err.message(), str(err.status()))
                time.sleep(0.05)
            except Exception:  # noqa: BLE001 - the network timeout: never answered
                self._add(sent, "lost")
                return
        client.close()

    def _stream(self) -> None:
        client = grpcclient.InferenceServerClient(self.grpc_url)
        answers: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        values = grpcclient.InferInput("IN", [3], "INT32")
        values.set_data_from_numpy(np.array([1, 2, 3], np.int32))
        delay = grpcclient.InferInput("DELAY", [1], "UINT32")
        delay.set_data_from_numpy(np.array([30], np.uint32))
        try:
            while not self.stop.is_set():
                sent = time.monotonic()
                client.async_stream_infer("repeat", [values, delay])
                got, error = 0, None
                try:
                    while got < 3 and error is None:
                        result, error = answers.get(timeout=ANSWER_WITHIN_S)
                        got += error is None
                except queue.Empty:
                    self._add(sent, "lost")
                    return
                if error is not None:  # a stream's error carries a message, no status
                    self._add(sent, error.message())
                    time.sleep(0.05)
                else:
                    self._add(sent)
        finally:
            client.stop_stream()
            client.close()


class Cluster:
    """Workers w1 and w2 serving sleepy (one instance each) and repeat; a frontend."""

    def __init__(self, nats, tmp: Path) -> None:
        self.nats = nats
        self.repo = _repository(tmp)
        self.tmp = tmp
        self.plane = ["--request-plane", nats.url, *PLANE_ARGS]
        self.workers = {name: self.worker(name) for name in ("w1", "w2")}
        self.frontend = RunningServer([], self.plane, tmp / "frontend.log")

    def worker(self, name: str) -> RunningServer:
        return RunningServer([self.repo], [*self.plane, "--worker-name", name],
                             self.tmp / f"{name}.log")

    def wait_ready(self) -> None:
        for server in (*self.workers.values(), self.frontend):
            server.wait_ready(60)
        client = self.frontend.http_client()
        wait_for(lambda: all(client.is_model_ready(m) for m in ("sleepy", "repeat")),
                 "sleepy and repeat ready", 60)

    def load(self) -> Load:
        return Load(self.frontend.http_url, self.frontend.grpc_url)

    def stop(self) -> None:
        for server in (self.frontend, *self.workers.values()):
            server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    with running_nats(tmp / "nats.log") as nats:
        c = Cluster(nats, tmp)
        try:
            c.wait_ready()
            yield c
        finally:
            c.stop()
    sweep_dead_owners()  # a killed worker's shared memory, as its next start does


def _answered_after(outcomes_of, moment: float) -> bool:
    """Whether unary and stream clients have each been answered right since `moment`."""
    ok = [o for o in outcomes_of() if not o.error and o.sent >= moment]
    return len(ok) >= 4


def test_a_nats_server_restart_under_load_loses_nothing(cluster):
    load = cluster.load()
    load.start()
    wait_for(lambda: _answered_after(lambda: load.outcomes, 0), "a first answer", 30)
    killed = time.monotonic()
    cluster.nats.kill()
    time.sleep(1.5)  # clients keep sending into the gap
    cluster.nats.start()
    back = time.monotonic()
    wait_for(lambda: _answered_after(lambda: load.outcomes, back),
             "answers after the worker came back", 60)
    outcomes = load.finish()

    assert not [o for o in outcomes if o.error == "lost"]
    failed = [o for o in outcomes if o.error]
    assert failed, "the gap failed nothing: the fault did not happen under load"
    plane = f"request plane {cluster.nats.url}"
    for o in failed:
        # Every failure is the gap's: in flight at it or sent during it, naming the plane.
        assert o.ended >= killed and o.sent < back + 5, o
        # (or, once back, the workers' entries lapsed before they put them again)
        assert plane in o.error or "is gone (no heartbeat within" in o.error, o
        assert o.status in ("", "503"), o


def test_a_worker_killed_under_load_loses_nothing(cluster):
    load = cluster.load()
    load.start()
    wait_for(lambda: _sleeping_worker(cluster) is not None, "a worker running sleepy", 30)
    name = _sleeping_worker(cluster)
    victim = cluster.workers[name]
    stubs = stub_pids(victim.pid)
    killed = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    victim.proc.wait(10)
    # The survivor serves everything from now on; the requests the victim had fail
    # once its registry entries expire (3 heartbeats).
    wait_for(lambda: _answered_after(lambda: load.outcomes, killed + 4),
             "answers after the kill", 60)
    outcomes = load.finish()
    victim.stop()

    assert not [o for o in outcomes if o.error == "lost"]
    failed = [o for o in outcomes if o.error]
    assert failed, "the victim had a request in flight (its stub slept), none failed"
    for o in failed:
        assert o.sent < killed, f"sent after the kill, yet failed: {o}"
        assert f"worker '{name}' serving model " in o.error and "is gone" in o.error, o
        assert o.status in ("", "503"), o
    # Its stubs end once they see it gone.
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in stubs),
             "the killed worker's stubs to end", 30)


def _sleeping_worker(cluster: Cluster) -> str | None:
    """A worker whose sleepy stub sleeps in execute (a request in flight there)."""
    return next((name for name, worker in cluster.workers.items()
                 if sleeping_in_execute(worker.pid, "sleepy")), None)


# A frontend alone on its plane; a long heartbeat (entries live 30 s), so that a worker
# started again under its name is back well within its old entries' TTL.
LONG_BEAT = ["--plane-heartbeat-secs", "10"]


@pytest.fixture(scope="module")
def lone(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lone")
    with running_nats(tmp / "nats.log") as nats:
        frontend = RunningServer([], ["--request-plane", nats.url, *LONG_BEAT],
                                 tmp / "frontend.log")
        try:
            frontend.wait_ready(60)
            yield nats, frontend, tmp
        finally:
            frontend.stop()
    sweep_dead_owners()


def _sleepy(module, ms: int):
    tensor = module.InferInput("SLEEP_MS", [1], "INT32")
    tensor.set_data_from_numpy(np.array([ms], np.int32))
    return tensor


def test_a_frontend_no_worker_has_joined_says_so(lone):
    nats, frontend, _ = lone
    http, grpc = frontend.http_client(), frontend.grpc_client()
    said = f"no worker serves model 'sleepy': the registry of request plane {nats.url} is empty"
    assert not http.is_model_ready("sleepy") and not grpc.is_model_ready("sleepy")
    assert http.get_model_repository_index() == []
    for call in (lambda: http.infer("sleepy", [_sleepy(httpclient, 0)]),
                 lambda: http.get_model_metadata("sleepy"),
                 lambda: http.get_model_config("sleepy")):
        with pytest.raises(InferenceServerException, match=said) as err:
            call()
        assert err.value.status() == "503"
    with pytest.raises(InferenceServerException, match=said) as err:
        grpc.infer("sleepy", [_sleepy(grpcclient, 0)])
    assert err.value.status() == "StatusCode.UNAVAILABLE"


def test_a_worker_started_again_under_its_name_fails_what_the_old_one_had(lone):
    nats, frontend, tmp = lone
    repo = _repository(tmp)
    plane = ["--request-plane", nats.url, *LONG_BEAT, "--worker-name", "w1"]
    worker = RunningServer([repo], plane, tmp / "w1.log")
    again = None
    try:
        worker.wait_ready(60)
        client = frontend.http_client(network_timeout=120)
        wait_for(lambda: client.is_model_ready("sleepy"), "sleepy ready", 60)
        # Once a worker has joined, a model no worker serves is unknown, as locally.
        with pytest.raises(InferenceServerException, match="unknown model: 'nope'") as err:
            client.infer("nope", [_sleepy(httpclient, 0)])
        assert err.value.status() == "404"
        pending = client.async_infer("sleepy", [_sleepy(httpclient, 3000)])
        wait_for(lambda: sleeping_in_execute(worker.pid), "a stub sleeping in execute", 30)
        stubs = stub_pids(worker.pid)
        os.kill(worker.pid, signal.SIGKILL)
        worker.proc.wait(10)
        # A supervisor starts it again under its name, long before the old entries'
        # TTL: its new entries say the old process is gone, and its request with it.
        again = RunningServer([repo], plane, tmp / "w1-again.log")
        again.wait_ready(60)
        with pytest.raises(InferenceServerException) as err:
            pending.get_result()
        assert err.value.status() == "503"
        assert "worker 'w1' serving model 'sleepy' is gone: it was started again" in \
            err.value.message()
        result = client.infer("sleepy", [_sleepy(httpclient, 0)])
        assert int(result.as_numpy("PID")[0]) in stub_pids(again.pid)
    finally:
        worker.stop()
        if again is not None:
            again.stop()
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in stubs),
             "the killed worker's stubs to end", 30)
