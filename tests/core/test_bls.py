"""BLS (models calling models) and cancellation, through a real server."""

from __future__ import annotations

import json
import os
import queue
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from client_inputs import http_input as h_in, send_and_hang_up
from pbserve.testing import running_server
from polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "models" / "examples"
TEST_MODELS = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture(scope="module", params=[1, 2], ids=["in-process", "2-frontend-processes"])
def server(request, tmp_path_factory):
    """With frontend processes, a call to a model the default scheduler serves goes from
    stub to stub directly (stub/direct_bls.py); the others through the core."""
    log = tmp_path_factory.mktemp("bls") / "server.log"
    args = ["--frontend-processes", "2"] if request.param > 1 else []
    with running_server(EXAMPLES, TEST_MODELS, log_path=log, args=args,
                        ready_path="/v2/health/live") as srv:
        yield srv


def shm_bytes(server) -> int:
    """Bytes of shared memory held under this server's names (its pools and queues)."""
    prefix = f"pbserve-{server.pid}-"
    total = 0
    for name in os.listdir("/dev/shm"):
        if name.startswith(prefix):
            total += os.stat(os.path.join("/dev/shm", name)).st_size
    return total


def wait_for_json(path: Path, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            time.sleep(0.05)
            return json.loads(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} was never written")


def test_nested_bls_a_to_b_to_c(server):
    x = np.arange(8, dtype=np.float32)
    result = server.http_client().infer("bls_chain_a", [h_in("X", x)])
    np.testing.assert_array_equal(result.as_numpy("Y"), x * 2 + 1)


def test_async_decoupled_model_awaits_bls_calls(server):
    x = np.arange(16, dtype=np.float32)
    events: queue.Queue = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    try:
        tensor = grpcclient.InferInput("X", [16], "FP32")
        tensor.set_data_from_numpy(x)
        client.async_stream_infer("bls_async_stream", [tensor], request_id="r1")
        sums = []
        for _ in range(2):
            result, error = events.get(timeout=20)
            assert error is None, error
            sums.append(result.as_numpy("SUM"))
    finally:
        client.stop_stream()
    assert sorted(s[1] for s in sums) == [x[1] * 2, x[1] * 3]


def test_model_calling_itself_with_no_free_instance_gets_a_deadlock_error(server):
    result = server.http_client().infer("self_caller", [h_in("DEPTH", np.array([0], np.int32))])
    text = result.as_numpy("ERROR")[0].decode()
    assert "deadlock" in text and "self_caller" in text


def test_a_thousand_bls_calls_leave_no_shared_memory_growth(server):
    client = server.http_client()
    x = np.ones(1024, dtype=np.float32)
    for _ in range(50):
        client.infer("bls_chain_a", [h_in("X", x)])
    time.sleep(0.2)
    before = shm_bytes(server)
    for _ in range(1000):
        client.infer("bls_chain_a", [h_in("X", x)])
    time.sleep(0.2)
    assert shm_bytes(server) == before


def test_http_client_going_away_cancels_the_running_request(server, tmp_path):
    marker = tmp_path / "http.json"
    send_and_hang_up(server, "cancel_probe", marker)
    seen = wait_for_json(marker)
    assert seen == {"cancelled": True, "at_start": False, "sender": True}


def test_cancelled_grpc_stream_reaches_the_model(server, tmp_path):
    marker = tmp_path / "grpc.json"
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: None)
    tensor = grpcclient.InferInput("MARKER", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([str(marker).encode()], dtype=np.object_))
    client.async_stream_infer("cancel_probe", [tensor], request_id="c1")
    time.sleep(0.5)
    client.stop_stream(cancel_requests=True)
    assert wait_for_json(marker)["cancelled"] is True


def test_cancelling_a_request_cancels_its_bls_child(server, tmp_path):
    marker = tmp_path / "child.json"
    send_and_hang_up(server, "bls_cancel_parent", marker)
    seen = wait_for_json(marker)
    assert seen["cancelled"] is True and seen["at_start"] is False
    # the parent model got the child's cancellation as a response and is free again
    x = np.arange(4, dtype=np.float32)
    server.http_client().infer("bls_chain_a", [h_in("X", x)])


def test_bls_from_a_process_the_model_forked_is_refused_at_once_and_the_model_goes_on(server):
    client = server.http_client()
    x = np.arange(4, dtype=np.float32)
    for _ in range(2):  # the refusal harms nothing: the model answers again
        raised = client.infer("bls_in_fork", [h_in("INPUT_FP32", x)]).as_numpy("ERROR")[0]
        assert b"BLS from a process the model forked is not supported" in raised
    np.testing.assert_array_equal(
        client.infer("bls_forward", [h_in("INPUT_FP32", x)]).as_numpy("OUTPUT_FP32"), x)


def test_bls_outputs_handed_on_untouched_are_correct_and_freed(server):
    client = server.http_client()
    for size in (1, 1000, 1 << 20):
        x = np.random.default_rng(size).random(size, dtype=np.float32)
        result = client.infer("bls_forward", [h_in("INPUT_FP32", x)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT_FP32"), x)
    x = np.arange(4096, dtype=np.float32)
    for _ in range(20):  # the pools grow to what this size needs, once
        client.infer("bls_forward", [h_in("INPUT_FP32", x)])
    time.sleep(0.2)
    before = shm_bytes(server)
    for _ in range(300):
        result = client.infer("bls_forward", [h_in("INPUT_FP32", x)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT_FP32"), x)
    # 300 outputs not freed would grow the pools by 5 MB; an idle pool may shrink
    # meanwhile (Pool.trim), so the check is that they did not grow
    wait_for(lambda: shm_bytes(server) <= before, "the pools to be back within their "
             f"size before the 300 calls, {before} bytes", timeout_s=5)


def test_bls_pipeline_example_preprocesses_calls_two_models_and_merges(server):
    x = np.arange(16, dtype=np.float32)
    result = server.http_client().infer("bls_pipeline", [h_in("INPUT", x)])
    np.testing.assert_allclose(result.as_numpy("OUTPUT"), 3 * (x - x.mean()))


def test_bls_stream_sum_example_streams_running_totals(server):
    events: queue.Queue = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    try:
        tensor = grpcclient.InferInput("IN", [4], "INT32")
        tensor.set_data_from_numpy(np.array([4, 2, 1, 3], dtype=np.int32))
        client.async_stream_infer("bls_stream_sum", [tensor], request_id="s",
                                  enable_empty_final_response=True)
        totals = []
        while True:
            result, error = events.get(timeout=20)
            assert error is None, error
            if result.as_numpy("TOTAL") is not None:
                totals.append(int(result.as_numpy("TOTAL")[0]))
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
    assert totals == [4, 6, 7, 10]


def test_opted_in_coroutine_is_cancelled_with_its_request(server, tmp_path):
    marker = tmp_path / "coroutine.json"
    events: queue.Queue = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    tensor = grpcclient.InferInput("MARKER", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([str(marker).encode()], dtype=np.object_))
    client.async_stream_infer("cancel_coroutine", [tensor], request_id="co")
    result, error = events.get(timeout=20)
    assert error is None and result.as_numpy("STARTED")[0]
    client.stop_stream(cancel_requests=True)
    assert wait_for_json(marker) == {"coroutine": "cancelled"}


def test_an_input_is_lent_back_only_for_the_request_it_belongs_to(server):
    """identity may answer a client's large input from that input's own block; the same
    memory reaching it later through a BLS call (not its request's own copy) must be
    copied, or the outer request would free it under the answer."""
    client = server.http_client()
    x = np.random.default_rng(3).random(64 * 1024, dtype=np.float32)  # 256 KiB
    for _ in range(5):
        direct = client.infer("identity", [h_in("INPUT_FP32", x)])
        np.testing.assert_array_equal(direct.as_numpy("OUTPUT_FP32"), x)
        forwarded = client.infer("bls_forward", [h_in("INPUT_FP32", x)])
        np.testing.assert_array_equal(forwarded.as_numpy("OUTPUT_FP32"), x)
    time.sleep(0.2)
    assert "unknown block" not in server.log_text()


def test_a_kept_bls_output_lent_from_an_input_stays_valid(server):
    """identity lends the caller's input back; the caller keeps that array across
    requests: the parent's reference counts must keep the block from being reused."""
    client = server.http_client()
    seen = []
    for i in range(8):
        x = np.full(64 * 1024, float(i), dtype=np.float32)  # 256 KiB: lent, not copied
        kept = client.infer("bls_keeper", [h_in("INPUT_FP32", x)]).as_numpy("KEPT")
        seen.append(float(i))
        assert kept.tolist() == seen


def test_bls_from_the_main_thread_and_a_model_thread_under_concurrent_requests(server):
    """The main thread's calls are answered on its main queue (stub/direct_replies.py),
    a model thread's through the control thread; with eight clients on one instance the
    next EXECUTE waits on that main queue while the main thread waits for its answer,
    and must be run after it, in order."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> None:
        client = server.http_client()
        x = np.arange(i % 7 + 1, dtype=np.float32) * i
        result = client.infer("bls_two_threads", [h_in("INPUT_FP32", x)])
        np.testing.assert_array_equal(result.as_numpy("FROM_MAIN"), x + 1)
        np.testing.assert_array_equal(result.as_numpy("FROM_WORKER"), x * 2)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(48)))
    import urllib.request
    with urllib.request.urlopen(server.metrics_url, timeout=5) as reply:
        text = reply.read().decode()
    assert 'bls_two_threads_calls{model="bls_two_threads"} 48' in text


def test_a_cancelled_bls_child_waiting_behind_a_busy_callee_never_runs(server, tmp_path,
                                                                         request):
    """The BLS child waits (cancel_probe's one instance is busy) when its caller's client
    goes away: the child is dropped before `execute`, and the server goes on serving.
    With frontend processes the child is a direct call (stub/direct_bls.py), waiting in
    the callee's queue, and its cancellation comes through its caller and the core: it
    may reach the callee after the busy request ended, and the child then starts, and
    sees its cancellation (docs/frontend_processes.md)."""
    busy, child = tmp_path / "busy.json", tmp_path / "child.json"
    body_of = lambda marker: json.dumps({"inputs": [{  # noqa: E731
        "name": "MARKER", "datatype": "BYTES", "shape": [1], "data": [str(marker)]}]}).encode()
    post = b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=5) as running:
        body = body_of(busy)
        running.sendall(post % (b"cancel_probe", len(body), body))
        time.sleep(0.3)  # cancel_probe runs it (until it is cancelled)
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=5) as caller:
            body = body_of(child)
            caller.sendall(post % (b"bls_cancel_parent", len(body), body))
            time.sleep(0.3)  # its BLS call waits for cancel_probe
    assert wait_for_json(busy)["cancelled"] is True
    time.sleep(0.5)
    if request.node.callspec.params["server"] == 1:
        assert not child.exists()
    else:
        assert not child.exists() or wait_for_json(child)["cancelled"] is True
    x = np.arange(4, dtype=np.float32)
    server.http_client().infer("bls_chain_a", [h_in("X", x)])
