"""Several machines on one: a real nats-server (the wheel's), two pbserve workers and a
model-less frontend as separate processes, driven with tritonclient through the frontend."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import RunningServer, running_nats
from shm.names import sweep_dead_owners

ROOT = Path(__file__).resolve().parent.parent
HEARTBEAT_S = 1.0  # registry TTL: 3 beats (short ones expire on a loaded machine)


def _repository(tmp: Path) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    for source in (ROOT / "tests/models/sleepy", ROOT / "tests/models/cancel_probe",
                   ROOT / "models/examples/repeat"):
        shutil.copytree(source, repo / source.name)
    return repo


class Cluster:
    """nats-server, workers 'w1' and 'w2' serving `repo`, and a frontend."""

    def __init__(self, nats, repo: Path, logs: Path) -> None:
        self.nats = nats
        plane = ["--request-plane", nats.url, "--plane-heartbeat-secs", str(HEARTBEAT_S)]
        self.workers = {name: RunningServer([repo], [*plane, "--worker-name", name],
                                            logs / f"{name}.log") for name in ("w1", "w2")}
        self.frontend = RunningServer([], plane, logs / "frontend.log")

    def wait_ready(self) -> None:
        for worker in self.workers.values():
            worker.wait_ready()
        self.frontend.wait_ready()
        # Both workers registered, and the frontend has read the registry since.
        wait_for(lambda: {e["worker"] for e in self.registry()} == {"w1", "w2"})
        client = self.frontend.http_client()
        wait_for(lambda: all(client.is_model_ready(m) for m in ("sleepy", "repeat", "cancel_probe")))

    def registry(self) -> list[dict]:
        """The registry bucket's entries, read straight from NATS."""
        return asyncio.run(_read_registry(self.nats.url))

    def stop(self) -> None:
        for server in (self.frontend, *self.workers.values()):
            server.stop()


async def _read_registry(url: str) -> list[dict]:
    import nats

    from pbserve.distributed.registry import BUCKET

    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().key_value(BUCKET)
        watcher = await kv.watchall(ignore_deletes=True)
        entries = []
        while (update := await watcher.updates(timeout=5)) is not None:
            if update.value:
                entries.append(json.loads(update.value))
        await watcher.stop()
        return entries
    finally:
        await nc.close()


def wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not met in {timeout} s: {condition}"
        time.sleep(0.05)


@contextlib.contextmanager
def cluster(tmp_path: Path):
    with running_nats(tmp_path / "nats.log") as nats:
        c = Cluster(nats, _repository(tmp_path), tmp_path)
        try:
            c.wait_ready()
            yield c
        finally:
            c.stop()


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with cluster(tmp_path_factory.mktemp("plane")) as c:
        yield c


def _sleepy_input(module, ms: int):
    tensor = module.InferInput("SLEEP_MS", [1], "INT32")
    tensor.set_data_from_numpy(np.array([ms], np.int32))
    return tensor


def _worker_of(stub_pid: int) -> int:
    """The pid of the process that started this stub: the worker serving it."""
    with open(f"/proc/{stub_pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_frontend_serves_the_workers_models_from_the_registry(plane):
    client = plane.frontend.http_client()
    assert client.is_server_ready()
    index = client.get_model_repository_index()
    assert {(m["name"], m["state"]) for m in index} == {
        ("sleepy", "READY"), ("cancel_probe", "READY"), ("repeat", "READY")}
    assert client.is_model_ready("sleepy")
    assert client.get_model_metadata("sleepy")["outputs"] == [
        {"name": "PID", "datatype": "INT64", "shape": [1]}]
    assert client.get_model_config("repeat")["model_transaction_policy"]["decoupled"]
    with pytest.raises(InferenceServerException, match="unknown model: 'nope'"):
        client.get_model_metadata("nope")


def test_infer_through_the_frontend_shares_the_load_between_workers(plane):
    # sleepy has one instance on each worker, so each takes one request at a time.
    client = plane.frontend.http_client(concurrency=4)
    pending = [client.async_infer("sleepy", [_sleepy_input(httpclient, 300)])
               for _ in range(4)]
    stubs = {int(p.get_result().as_numpy("PID")[0]) for p in pending}
    workers = {w.pid for w in plane.workers.values()}
    assert {_worker_of(pid) for pid in stubs} == workers
    grpc = plane.frontend.grpc_client()
    result = grpc.infer("sleepy", [_sleepy_input(grpcclient, 0)])
    assert _worker_of(int(result.as_numpy("PID")[0])) in workers


def test_decoupled_model_streams_over_grpc_through_the_frontend(plane):
    client = plane.frontend.grpc_client()
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put(error or result))
    try:
        values = np.array([4, 3, 2, 1], np.int32)
        tensor = grpcclient.InferInput("IN", [4], "INT32")
        tensor.set_data_from_numpy(values)
        delay = grpcclient.InferInput("DELAY", [1], "UINT32")
        delay.set_data_from_numpy(np.array([50], np.uint32))
        client.async_stream_infer("repeat", [tensor, delay], request_id="r1")
        for index, value in enumerate(values):
            result = results.get(timeout=10)
            assert not isinstance(result, Exception), result
            assert result.get_response().id == "r1"
            assert (result.as_numpy("IDX")[0], result.as_numpy("OUT")[0]) == (index, value)
    finally:
        client.stop_stream()


def _probe_input(marker: Path):
    tensor = grpcclient.InferInput("MARKER", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([str(marker).encode()], dtype=object))
    return tensor


def test_a_cancelled_call_reaches_the_model_on_its_worker(plane, tmp_path):
    client = plane.frontend.grpc_client()
    marker = tmp_path / "cancelled.json"
    errors: queue.Queue = queue.Queue()
    call = client.async_infer("cancel_probe", [_probe_input(marker)],
                              callback=lambda result, error: errors.put(error))
    time.sleep(0.3)  # running on a worker by now (else it is dropped before execute)
    call.cancel()
    assert "CANCELLED" in str(errors.get(timeout=10))
    wait_for(marker.exists)
    wait_for(lambda: marker.read_text().endswith("}"))
    assert json.loads(marker.read_text())["cancelled"] is True


def test_a_request_timeout_reaches_the_model_on_its_worker(plane, tmp_path):
    client = plane.frontend.grpc_client()
    marker = tmp_path / "timeout.json"
    # A running request whose timeout passes is cancelled; the model decides the answer.
    result = client.infer("cancel_probe", [_probe_input(marker)], timeout=300_000)
    assert result.as_numpy("SEEN")[0]
    assert json.loads(marker.read_text())["cancelled"] is True


def test_a_killed_workers_request_fails_unavailable_and_the_next_ones_succeed(tmp_path):
    with cluster(tmp_path) as c:
        client = c.frontend.http_client(network_timeout=60)
        # A long request (longer than the registry's TTL), then kill the worker running it.
        pending = client.async_infer("sleepy", [_sleepy_input(httpclient, 6000)])
        wait_for(lambda: _busy_worker(c) is not None)
        name = _busy_worker(c)
        victim, survivor = c.workers[name], c.workers[({"w1", "w2"} - {name}).pop()]
        stub_pids = _stub_pids(victim.pid)
        os.kill(victim.pid, signal.SIGKILL)
        victim.proc.wait(10)
        with pytest.raises(InferenceServerException) as err:
            pending.get_result()
        assert err.value.status() == "503"
        assert f"worker '{name}' serving model 'sleepy' is gone" in err.value.message()
        for _ in range(3):
            result = client.infer("sleepy", [_sleepy_input(httpclient, 0)])
            assert _worker_of(int(result.as_numpy("PID")[0])) == survivor.pid
        wait_for(lambda: {e["worker"] for e in c.registry()} == {survivor_name(c, survivor)})
        # A worker that exits removes its entries at once (no TTL to wait for).
        survivor.stop()
        assert c.registry() == []
        wait_for(lambda: not client.is_model_ready("sleepy"))
    # Its stubs exit once the sleep ends (they see their parent gone).
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in stub_pids), timeout=30)
    sweep_dead_owners()  # what a killed worker's next start does


def survivor_name(c: Cluster, server: RunningServer) -> str:
    return next(n for n, w in c.workers.items() if w is server)


def _stub_pids(worker_pid: int) -> list[int]:
    with open(f"/proc/{worker_pid}/task/{worker_pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _busy_worker(c: Cluster) -> str | None:
    """The name of the worker whose sleepy stub is sleeping in execute, if one is."""
    for name, worker in c.workers.items():
        for pid in _stub_pids(worker.pid):
            with contextlib.suppress(FileNotFoundError):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"sleepy" not in f.read():
                        continue
                with open(f"/proc/{pid}/wchan") as f:
                    if f.read() == "hrtimer_nanosleep":
                        return name
    return None


def _failures(plane: Cluster, model: str) -> int:
    """nv_inference_request_failure of `model`, summed over the workers."""
    import urllib.request

    total = 0
    for worker in plane.workers.values():
        text = urllib.request.urlopen(worker.metrics_url, timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith("nv_inference_request_failure{") and f'model="{model}"' in line:
                total += int(float(line.rsplit(" ", 1)[1]))
    return total


def test_a_stream_closed_with_cancel_requests_cancels_the_request_on_its_worker(plane):
    before = _failures(plane, "repeat")
    client = plane.frontend.grpc_client()
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put(error or result))
    tensor = grpcclient.InferInput("IN", [100], "INT32")
    tensor.set_data_from_numpy(np.arange(100, dtype=np.int32))
    delay = grpcclient.InferInput("DELAY", [1], "UINT32")
    delay.set_data_from_numpy(np.array([50], np.uint32))
    client.async_stream_infer("repeat", [tensor, delay])
    first = results.get(timeout=10)
    assert not isinstance(first, Exception), first
    client.stop_stream(cancel_requests=True)
    # The worker's model stops early: the request ends as cancelled (a failure there).
    wait_for(lambda: _failures(plane, "repeat") == before + 1)


def _successes(plane: Cluster, model: str) -> int:
    """nv_inference_request_success of `model`, summed over the workers."""
    import urllib.request

    total = 0
    for worker in plane.workers.values():
        text = urllib.request.urlopen(worker.metrics_url, timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith("nv_inference_request_success{") and f'model="{model}"' in line:
                total += int(float(line.rsplit(" ", 1)[1]))
    return total


def test_a_request_whose_timeout_passes_in_the_plane_fails_and_is_never_run(plane):
    before = _successes(plane, "sleepy")
    client = plane.frontend.http_client(concurrency=3)
    # Both workers busy (one sleepy instance each), then one more with a timeout.
    busy = [client.async_infer("sleepy", [_sleepy_input(httpclient, 1500)])
            for _ in range(2)]
    time.sleep(0.3)
    late = client.async_infer("sleepy", [_sleepy_input(httpclient, 0)], timeout=100_000)
    with pytest.raises(InferenceServerException, match="Request timeout expired") as err:
        late.get_result()
    assert err.value.status() == "503"
    for pending in busy:
        pending.get_result()
    # The next request is pulled after the timed-out one: once it is answered, the
    # timed-out one was dropped, not run.
    client.infer("sleepy", [_sleepy_input(httpclient, 0)])
    client.infer("sleepy", [_sleepy_input(httpclient, 0)])
    assert _successes(plane, "sleepy") == before + 4
