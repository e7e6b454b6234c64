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

from pbserve.testing import RunningServer, parent_of, running_nats, stub_pids
from shm.names import sweep_dead_owners
from stub_probe import sleeping_in_execute

ROOT = Path(__file__).resolve().parents[2]
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
    """The pid of the process that started this stub (or its stub zygote): the worker
    serving it."""
    found = parent_of(stub_pid)
    with open(f"/proc/{found}/cmdline", "rb") as f:
        return parent_of(found) if b"stub.zygote" in f.read() else found


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


def test_client_shared_memory_through_a_frontend_is_refused_naming_why(plane):
    """--allow-client-shm is true on the frontend too: the error must not tell the user
    to set it, but that a frontend has no client regions, and what to do instead."""
    client = plane.frontend.http_client()
    with pytest.raises(InferenceServerException) as refused:
        client.register_system_shared_memory("r", "/client_region", 64)
    message = refused.value.message()
    assert "not supported by a pbserve frontend of the request plane" in message
    assert "--allow-client-shm" not in message
    grpc = plane.frontend.grpc_client()
    with pytest.raises(InferenceServerException, match="not supported by a pbserve "
                                                       "frontend"):
        grpc.register_system_shared_memory("r", "/client_region", 64)


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
        stubs = stub_pids(victim.pid)
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
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in stubs), timeout=30)
    sweep_dead_owners()  # what a killed worker's next start does


def survivor_name(c: Cluster, server: RunningServer) -> str:
    return next(n for n, w in c.workers.items() if w is server)


def _busy_worker(c: Cluster) -> str | None:
    """The name of the worker whose sleepy stub is sleeping in execute, if one is."""
    return next((name for name, worker in c.workers.items()
                 if sleeping_in_execute(worker.pid, "sleepy")), None)


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


# -- BLS across workers: remote_caller on w1 calls add_sub and repeat, served by w2 only --

def test_a_frontend_not_in_explicit_mode_refuses_load_and_unload(plane):
    client = plane.frontend.http_client()
    for call in (client.load_model, client.unload_model):
        with pytest.raises(InferenceServerException, match="not allowed if model control "
                                                           "mode is not EXPLICIT"):
            call("sleepy")
    assert client.is_model_ready("sleepy")


def _split_repositories(tmp: Path) -> tuple[Path, Path]:
    callers, targets = tmp / "callers", tmp / "targets"
    shutil.copytree(ROOT / "tests/models/remote_caller", callers / "remote_caller")
    for name in ("add_sub", "repeat", "identity"):
        shutil.copytree(ROOT / "models/examples" / name, targets / name)
    shutil.copytree(ROOT / "tests/models/cancel_probe", targets / "cancel_probe")
    return callers, targets


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """w1 serves remote_caller, w2 the models it calls; and a frontend."""
    tmp = tmp_path_factory.mktemp("split")
    callers, targets = _split_repositories(tmp)
    with running_nats(tmp / "nats.log") as nats:
        plane = ["--request-plane", nats.url, "--plane-heartbeat-secs", str(HEARTBEAT_S),
                 "--model-control-mode", "explicit", "--load-model", "*"]
        servers = {"w1": RunningServer([callers], [*plane, "--worker-name", "w1"],
                                       tmp / "w1.log"),
                   "w2": RunningServer([targets], [*plane, "--worker-name", "w2"],
                                       tmp / "w2.log"),
                   "frontend": RunningServer([], plane, tmp / "frontend.log")}
        try:
            for server in servers.values():
                server.wait_ready()
            models = ("remote_caller", "add_sub", "repeat", "cancel_probe", "identity")
            for name, server in servers.items():
                client = server.http_client()
                try:  # every model everywhere; on a loaded machine that may take a while
                    wait_for(lambda: all(client.is_model_ready(m) for m in models), 45.0)
                except AssertionError:
                    missing = [m for m in models if not client.is_model_ready(m)]
                    raise AssertionError(
                        f"{name} does not see {missing} ready; its log ends:\n"
                        f"{server.log_text()[-3000:]}") from None
            yield servers | {"targets": targets, "plane": plane}
        finally:
            for server in servers.values():
                server.stop()


def _remote_inputs(module, mode: str, x=None) -> list:
    x = np.arange(16, dtype=np.float32) if x is None else x
    inputs = [module.InferInput("MODE", [1], "BYTES"),
              module.InferInput("X", [len(x)], "FP32")]
    inputs[0].set_data_from_numpy(np.array([mode.encode()], dtype=object))
    inputs[1].set_data_from_numpy(x)
    return inputs


def _call_remote(client, module, mode: str, x=None):
    result = client.infer("remote_caller", _remote_inputs(module, mode, x))
    return result.as_numpy("Y"), json.loads(result.as_numpy("INFO")[0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_bls_exec_reaches_a_model_served_only_by_another_worker(split, mode, protocol):
    client = getattr(split["frontend"], f"{protocol}_client")()
    module = httpclient if protocol == "http" else grpcclient
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    y, info = _call_remote(client, module, mode, x)
    assert info == {"errors": [], "responses": 1}
    np.testing.assert_array_equal(y, x + x)


def test_a_large_tensor_goes_frontend_to_w1_to_w2_and_back_by_the_data_plane(split):
    """8 MiB: over the inline limit at every hop, so each is a descriptor pulled point to
    point (frontend -> w1, w1's BLS -> w2, and the answers back)."""
    x = np.random.default_rng(7).random(2 * 1024 * 1024, dtype=np.float32)
    y, info = _call_remote(split["frontend"].http_client(), httpclient, "identity", x)
    assert info == {"errors": [], "responses": 1}
    np.testing.assert_array_equal(y, x)


def test_bls_decoupled_stream_from_another_worker_yields_every_response(split):
    y, info = _call_remote(split["frontend"].http_client(), httpclient, "decoupled")
    # 16 responses, then the flag-only final one (as Triton's iterator yields it).
    assert info == {"errors": [], "responses": 17}
    np.testing.assert_array_equal(y, np.arange(16, dtype=np.float32))


def test_bls_stream_cancelled_by_the_caller_stops_the_remote_model(split):
    y, info = _call_remote(split["frontend"].http_client(), httpclient, "cancel")
    # The remote model saw the cancellation (it sends 200 responses otherwise) and the
    # stream ended with its final response.
    assert 1 <= len(y) < 200
    assert info["responses"] < 200


def test_a_cancelled_request_cancels_its_bls_call_on_the_other_worker(split, tmp_path):
    marker = tmp_path / "bls-cancelled.json"
    client = split["frontend"].grpc_client()
    errors: queue.Queue = queue.Queue()
    call = client.async_infer("remote_caller", _remote_inputs(grpcclient, f"probe:{marker}"),
                              callback=lambda result, error: errors.put(error))
    # Once cancel_probe runs on w2 (called by remote_caller on w1), cancel the client's
    # call: w1 cancels the BLS call, and the plane takes that to w2's model.
    wait_for(lambda: sleeping_in_execute(split["w2"].pid, "cancel_probe"))
    call.cancel()
    assert "CANCELLED" in str(errors.get(timeout=10))
    wait_for(lambda: marker.exists() and marker.read_text().endswith("}"))
    assert json.loads(marker.read_text())["cancelled"] is True


def test_is_model_ready_in_a_model_sees_the_other_workers_models(split):
    _, info = _call_remote(split["frontend"].http_client(), httpclient, "ready")
    assert info["ready"] == [True, False]


def test_a_bls_call_to_a_killed_worker_fails_unavailable_naming_it(split, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "tests/models/cancel_probe", repo / "doomed_probe")
    config = repo / "doomed_probe/config.pbtxt"
    config.write_text(config.read_text().replace('"cancel_probe"', '"doomed_probe"'))
    w3 = RunningServer([repo], [*split["plane"], "--worker-name", "w3"], tmp_path / "w3.log")
    try:
        w3.wait_ready()
        client = split["frontend"].http_client(network_timeout=60)
        wait_for(lambda: client.is_model_ready("doomed_probe"))
        pending = client.async_infer("remote_caller", _remote_inputs(
            httpclient, f"doomed:{tmp_path / 'marker'}"))
        wait_for(lambda: sleeping_in_execute(w3.pid, "doomed_probe"))
        stubs = stub_pids(w3.pid)
        os.kill(w3.pid, signal.SIGKILL)
        w3.proc.wait(10)
        info = json.loads(pending.get_result().as_numpy("INFO")[0])
        assert len(info["errors"]) == 1
        assert "worker 'w3' serving model 'doomed_probe' is gone" in info["errors"][0]
    finally:
        w3.stop()
    # Its stub exits once execute ends (it sees its parent gone).
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in stubs), timeout=30)
    sweep_dead_owners()


def test_bls_errors_across_workers_read_as_triton_words_them(split):
    client = split["frontend"].http_client()
    _, info = _call_remote(client, httpclient, "missing")
    # As a local call to an unknown model (tests/e2e/test_compat.py).
    assert info["errors"] == [
        "Model not_served_anywhere - Error when running inference: Failed for execute "
        "the inference request. Model 'not_served_anywhere' is not ready."]
    _, info = _call_remote(client, httpclient, "misuse")
    assert len(info["errors"]) == 1
    assert "Model repeat is using the decoupled" in info["errors"][0]


def test_a_worker_routes_requests_for_models_it_does_not_have_to_the_plane(split):
    # w1 has only remote_caller: add_sub (w2's) through w1's own HTTP and gRPC.
    x = np.ones(16, np.float32)
    for module, client in ((httpclient, split["w1"].http_client()),
                           (grpcclient, split["w1"].grpc_client())):
        inputs = [module.InferInput(n, [16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(x)
        assert client.get_model_metadata("add_sub")
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + x)
    with pytest.raises(InferenceServerException, match="unknown model: 'nope'"):
        split["w1"].http_client().infer("nope", [])


def _index(client) -> dict[str, str]:
    return {m["name"]: m.get("state", "") for m in client.get_model_repository_index()}


def test_load_and_unload_through_the_frontend_reach_the_worker_holding_the_model(split):
    client = split["frontend"].http_client()
    grpc = split["frontend"].grpc_client()
    client.unload_model("add_sub")
    # Answered once w2 has unloaded it and the frontend has read w2's entry again.
    assert not client.is_model_ready("add_sub")
    assert _index(client)["add_sub"] == "UNAVAILABLE"
    with pytest.raises(InferenceServerException, match="unknown model: 'add_sub'") as err:
        client.infer("add_sub", [])
    assert err.value.status() == "404"
    _, info = _call_remote(client, httpclient, "sync")  # BLS to it: not ready anywhere
    assert info["errors"] and "Model 'add_sub' is not ready" in info["errors"][0]
    grpc.load_model("add_sub")
    assert client.is_model_ready("add_sub") and _index(client)["add_sub"] == "READY"
    y, info = _call_remote(client, httpclient, "sync", np.ones(16, np.float32))
    assert info["errors"] == [] and (y == 2).all()
    # A model copied into w2's repository after start-up loads through the frontend.
    shutil.copytree(ROOT / "models/examples/identity", split["targets"] / "late_identity")
    config = split["targets"] / "late_identity/config.pbtxt"
    config.write_text(config.read_text().replace('name: "identity"', 'name: "late_identity"'))
    client.load_model("late_identity")
    assert client.is_model_ready("late_identity")
    assert split["w2"].http_client().is_model_ready("late_identity")
    with pytest.raises(InferenceServerException, match="failed to load 'nope', failed to "
                                                       "poll from model repository"):
        client.load_model("nope")
    client.unload_model("late_identity")
    assert not client.is_model_ready("late_identity")


def test_a_frontend_lists_the_repository_extension_it_serves(split):
    extensions = split["frontend"].http_client().get_server_metadata()["extensions"]
    assert "model_repository" in extensions and "system_shared_memory" not in extensions


REMOTE_ENSEMBLE = {
    "name": "remote_chain", "platform": "ensemble", "max_batch_size": 0,
    "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("A", "B")],
    "output": [{"name": "SUM", "data_type": "TYPE_FP32", "dims": [16]}],
    "ensemble_scheduling": {"step": [
        {"model_name": "add_sub", "model_version": -1,
         "input_map": {"INPUT0": "A", "INPUT1": "B"}, "output_map": {"OUTPUT0": "s"}},
        {"model_name": "identity", "model_version": -1,
         "input_map": {"INPUT_FP32": "s"}, "output_map": {"OUTPUT_FP32": "SUM"}}]}}


def test_an_ensemble_on_one_worker_runs_steps_served_by_another(split):
    # w1 has none of the composing models: its ensemble calls w2's through the plane.
    w1 = split["w1"].http_client()
    w1.load_model("remote_chain", config=json.dumps(REMOTE_ENSEMBLE),
                  files={"file:1/README.md": b"an ensemble's version folder"})
    frontend = split["frontend"].http_client()
    wait_for(lambda: frontend.is_model_ready("remote_chain"), 15.0)
    a, b = np.arange(16, dtype=np.float32), np.full(16, 2, np.float32)
    inputs = [httpclient.InferInput(n, [16], "FP32") for n in ("A", "B")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    np.testing.assert_array_equal(frontend.infer("remote_chain", inputs).as_numpy("SUM"),
                                  a + b)
    w1.unload_model("remote_chain")
