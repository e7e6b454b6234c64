"""Ensembles (`platform: "ensemble"`) through a real server, real stubs and tritonclient:
data flow, parallel steps, errors, BYTES, batching, decoupled steps, cancellation,
statistics, BLS to an ensemble and client shared memory."""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from client_inputs import grpc_input as g_in
from client_inputs import http_input as h_in
from ensemble_repo import write_repository
from pbserve.testing import running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = write_repository(tmp_path_factory.mktemp("ensembles"))
    log = tmp_path_factory.mktemp("ensemble-log") / "server.log"
    with running_server(repo, log_path=log) as srv:
        yield srv


@pytest.fixture
def http(server):
    client = server.http_client()
    yield client
    client.close()


@pytest.fixture
def grpc(server):
    client = server.grpc_client()
    yield client
    client.close()


def fp32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_a_chain_runs_each_step_in_order(http, grpc):
    data = fp32(1, 2, 3)
    result = http.infer("chain3", [h_in("INPUT0", data)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + 1)
    result = grpc.infer("chain3", [g_in("INPUT0", data)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + 1)


def test_independent_steps_and_the_outputs_asked_for(http):
    data = fp32(0, 1, 2, 3)
    result = http.infer("diamond", [h_in("IN", data)])
    np.testing.assert_array_equal(result.as_numpy("SUM"), 5 * data + 2)
    np.testing.assert_array_equal(result.as_numpy("DOUBLE"), 2 * data)
    only = http.infer("diamond", [h_in("IN", data)],
                      outputs=[httpclient.InferRequestedOutput("DOUBLE")])
    assert [o["name"] for o in only.get_response()["outputs"]] == ["DOUBLE"]
    np.testing.assert_array_equal(only.as_numpy("DOUBLE"), 2 * data)


def test_a_large_tensor_through_three_identity_steps(http, grpc):
    data = np.random.default_rng(1).random(1 << 20, dtype=np.float32)  # 4 MiB
    np.testing.assert_array_equal(
        http.infer("identity3", [h_in("INPUT0", data)]).as_numpy("OUTPUT0"), data)
    np.testing.assert_array_equal(
        grpc.infer("identity3", [g_in("INPUT0", data)]).as_numpy("OUTPUT0"), data)


def test_a_failing_step_fails_the_request_with_its_message(http, grpc):
    with pytest.raises(InferenceServerException) as info:
        http.infer("failing", [h_in("IN", fp32(-5, 1))])
    assert "in ensemble 'failing', negative input refused" in str(info.value)
    with pytest.raises(InferenceServerException, match="negative input refused"):
        grpc.infer("failing", [g_in("IN", fp32(-5, 1))])
    # the same ensemble and its models go on serving
    result = http.infer("failing", [h_in("IN", fp32(1, 2))])
    np.testing.assert_array_equal(result.as_numpy("OUT"), fp32(2, 3))


def test_a_request_is_checked_against_the_ensemble_config(http):
    with pytest.raises(InferenceServerException) as info:
        http.infer("chain3", [h_in("INPUT0", np.array([1, 2], np.int32))])
    assert "inference input 'INPUT0' data-type is 'INT32', but model 'chain3' expects " \
        "'FP32'" in str(info.value)
    with pytest.raises(InferenceServerException, match="unexpected inference input 'X' "
                       "for model 'chain3'"):
        http.infer("chain3", [h_in("X", fp32(1))])


def test_bytes_tensors_pass_between_steps(http):
    words = np.array([b"ensemble", b"steps"], dtype=object)
    result = http.infer("strings", [h_in("IN", words)])
    assert list(result.as_numpy("OUT")) == [b"ENSEMBLE", b"STEPS"]


def test_batched_ensemble_carries_the_batch_dimension(http):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = http.infer("batched", [h_in("IN", data)])
    np.testing.assert_array_equal(result.as_numpy("OUT"), data + 1)
    with pytest.raises(InferenceServerException, match="batch-size must be <= 8"):
        http.infer("batched", [h_in("IN", np.zeros((9, 1), np.float32))])


def test_a_decoupled_step_streams_through_the_ensemble(server, grpc, http):
    assert http.get_model_config("stream")["model_transaction_policy"] == {"decoupled": True}
    results: queue.Queue = queue.Queue()
    grpc.start_stream(callback=lambda result, error: results.put(error or result))
    try:
        grpc.async_stream_infer("stream", [g_in("IN", fp32(1, 10))], request_id="s1",
                                enable_empty_final_response=True)
        got = []
        while True:
            item = results.get(timeout=20)
            assert not isinstance(item, Exception), item
            params = item.get_response().parameters
            if params["triton_final_response"].bool_param and \
                    not item.get_response().outputs:
                break
            got.append(item.as_numpy("OUT").tolist())
    finally:
        grpc.stop_stream()
    assert sorted(got) == [[2.0, 11.0], [3.0, 21.0], [4.0, 31.0]]
    with pytest.raises(InferenceServerException, match="decoupled"):
        http.infer("stream", [h_in("IN", fp32(1))])


def test_statistics_count_the_ensemble_and_each_step(http):
    before = http.get_inference_statistics("chain3")["model_stats"][0]
    steps_before = http.get_inference_statistics("s_add")["model_stats"][0]
    for _ in range(3):
        http.infer("chain3", [h_in("INPUT0", fp32(1))])
    after = http.get_inference_statistics("chain3")["model_stats"][0]
    steps_after = http.get_inference_statistics("s_add")["model_stats"][0]
    success = after["inference_stats"]["success"]["count"]
    assert success - before["inference_stats"]["success"]["count"] == 3
    assert after["inference_count"] - before["inference_count"] == 3
    step_success = steps_after["inference_stats"]["success"]["count"] \
        - steps_before["inference_stats"]["success"]["count"]
    assert step_success == 3
    assert http.get_model_metadata("chain3")["platform"] == "ensemble"
    index = {(m["name"], m.get("state")) for m in http.get_model_repository_index()}
    assert ("chain3", "READY") in index and ("s_add", "READY") in index


def test_bls_call_to_an_ensemble(http):
    result = http.infer("bls_to_chain3", [h_in("INPUT0", fp32(4, 5))])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), fp32(5, 6))


def test_a_cancelled_request_cancels_the_running_step(server, grpc, tmp_path):
    marker = tmp_path / "marker"
    with pytest.raises(InferenceServerException, match="Deadline"):
        grpc.infer("slow", [g_in("IN", fp32(5000))], client_timeout=0.5,
                   parameters={"marker": str(marker)})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not marker.exists():
        time.sleep(0.05)
    assert marker.read_text() == "cancelled"
    # the next step never ran: s_add served nothing for it
    time.sleep(0.2)
    stats = grpc.get_inference_statistics("slow", as_json=True)["model_stats"][0]
    assert int(stats["inference_stats"].get("success", {}).get("count", 0)) == 0


def test_inputs_and_outputs_in_client_shared_memory(http):
    data = fp32(*range(16))
    key = f"/pbserve_ens_{os.getpid()}"
    handle = shm.create_shared_memory_region("ens", key, 2 * data.nbytes)
    try:
        shm.set_shared_memory_region(handle, [data])
        http.register_system_shared_memory("ens", key, 2 * data.nbytes)
        tensor = httpclient.InferInput("INPUT0", [16], "FP32")
        tensor.set_shared_memory("ens", data.nbytes)
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
        out.set_shared_memory("ens", data.nbytes, offset=data.nbytes)
        result = http.infer("chain3", [tensor], outputs=[out])
        assert result.get_output("OUTPUT0") == {"name": "OUTPUT0", "datatype": "FP32",
                                                "shape": [16]}  # no data: it is in shm
        written = shm.get_contents_as_numpy(handle, np.float32, [16], offset=data.nbytes)
        np.testing.assert_array_equal(written, data + 1)
    finally:
        http.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(handle)


def test_concurrent_requests_all_get_their_own_answer(http, server):
    clients = [server.http_client(concurrency=4) for _ in range(1)]
    pending = [clients[0].async_infer("diamond", [h_in("IN", fp32(i))]) for i in range(16)]
    for i, request in enumerate(pending):
        np.testing.assert_array_equal(request.get_result().as_numpy("SUM"), fp32(5 * i + 2))
    clients[0].close()


def test_no_shm_left_to_grow(server, http):
    prefix = f"pbserve-{server.pid}-"

    def held() -> int:
        return sum(os.stat(Path("/dev/shm") / n).st_size for n in os.listdir("/dev/shm")
                   if n.startswith(prefix))
    data = np.ones(1 << 20, np.float32)
    for _ in range(3):
        http.infer("identity3", [h_in("INPUT0", data)])
    first = held()
    for _ in range(10):
        http.infer("identity3", [h_in("INPUT0", data)])
    assert held() <= first


def test_a_decoupled_ensemble_over_generate_stream(server):
    import json
    import urllib.request
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/stream/generate_stream",
        data=json.dumps({"IN": [1.0, 10.0]}).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=20) as reply:
        events = [json.loads(line[len(b"data: "):]) for line in reply.read().splitlines()
                  if line.startswith(b"data: ")]
    assert sorted(e["OUT"] for e in events) == [[2.0, 11.0], [3.0, 21.0], [4.0, 31.0]]


def test_the_sentiment_example(tmp_path):
    examples = Path(__file__).resolve().parents[2] / "models" / "examples"
    load = [a for m in ("sentiment",) for a in ("--load-model", m)]
    with running_server(examples, args=["--model-control-mode", "explicit", *load]) as srv:
        client = srv.http_client()
        text = np.array([b"great food, fast service, but a slow and dirty room"], object)
        result = client.infer("sentiment", [h_in("TEXT", text)])
        assert result.as_numpy("LABEL")[0] == b"neutral"
        text = np.array([b"Great, clean and fast"], object)
        result = client.infer("sentiment", [h_in("TEXT", text)])
        assert result.as_numpy("LABEL")[0] == b"positive"
        assert result.as_numpy("SCORE")[0] == pytest.approx(1.0)
        # loading the ensemble loaded the three models it composes
        ready = {m["name"] for m in client.get_model_repository_index()
                 if m.get("state") == "READY"}
        assert ready == {"sentiment", "sentiment_preprocess", "add_sub",
                         "sentiment_postprocess"}
        client.close()


def test_a_traced_ensemble_request_traces_its_steps_as_children(tmp_path):
    import json
    repo = write_repository(tmp_path / "repo")
    trace_file = tmp_path / "trace.json"
    args = ["--trace-config", f"triton,file={trace_file}", "--trace-config",
            "level=TIMESTAMPS", "--trace-config", "rate=1", "--model-control-mode",
            "explicit", "--load-model", "chain3"]
    with running_server(repo, args=args) as srv:
        client = srv.http_client()
        client.infer("chain3", [h_in("INPUT0", fp32(1))], request_id="r1")
        client.close()
    records = json.loads(trace_file.read_text())
    heads = [r for r in records if "model_name" in r]
    ensemble = [r for r in heads if r["model_name"] == "chain3"]
    # as Triton: no parent_id for a trace of its own, no compute stamps for an ensemble
    assert len(ensemble) == 1 and "parent_id" not in ensemble[0]
    assert [t["name"] for r in records if r["id"] == ensemble[0]["id"]
            for t in r.get("timestamps", ())] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    steps = [r for r in heads if r.get("parent_id") == ensemble[0]["id"]]
    assert sorted(r["model_name"] for r in steps) == ["s_add", "s_identity", "s_identity"]
    assert all(r["request_id"] == "r1" for r in heads)
