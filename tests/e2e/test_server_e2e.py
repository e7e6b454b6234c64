"""pbserve end to end: the real server, real stubs, real shm, driven by tritonclient."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from client_inputs import http_input
from pbserve.testing import running_server
from shm.names import entries_with_prefix

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "models" / "examples"
TEST_MODELS = Path(__file__).resolve().parents[1] / "models"
LIVE = "/v2/health/live"  # bad_init never loads, so the server is live but not ready


def sleepy(client, ms: int) -> int:
    result = client.infer("sleepy", [http_input("SLEEP_MS", np.array([ms], np.int32))])
    return int(result.as_numpy("PID")[0])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "server.log"
    with running_server(EXAMPLES, TEST_MODELS, log_path=log,
                        ready_path="/v2/health/live") as srv:
        yield srv


def test_readme_add_sub_snippet_prints_sums_and_differences(server):
    client = server.http_client()
    a = np.arange(16, dtype=np.float32)
    result = client.infer("add_sub", [http_input("INPUT0", a), http_input("INPUT1", a)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_identity_returns_every_dtype_bit_exact(server, binary):
    arrays = {
        "BOOL": np.array([True, False, True]),
        "INT8": np.array([-128, 0, 127], np.int8),
        "INT16": np.array([-32768, 1, 32767], np.int16),
        "INT32": np.array([-2**31, 2, 2**31 - 1], np.int32),
        "INT64": np.array([-2**63, 3, 2**63 - 1], np.int64),
        "UINT8": np.array([0, 1, 255], np.uint8),
        "UINT16": np.array([0, 1, 65535], np.uint16),
        "UINT32": np.array([0, 1, 2**32 - 1], np.uint32),
        "UINT64": np.array([0, 1, 2**64 - 1], np.uint64),
        "FP16": np.array([-0.0, 65504, 1e-7], np.float16),
        "FP32": np.array([-0.0, np.inf, 1e-45], np.float32),
        "FP64": np.array([-0.0, -np.inf, 5e-324], np.float64),
        # JSON carries text only; the binary extension carries any bytes.
        "STRING": np.array([b"", b"\xff\x00bytes" if binary else b"plain",
                            "ünïcode".encode()], np.object_),
    }
    inputs = [http_input(f"INPUT_{t}", a, binary or t == "FP16") for t, a in arrays.items()]
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT_{t}", binary_data=binary or t == "FP16")
               for t in arrays]
    result = server.http_client().infer("identity", inputs, outputs=outputs)
    for t, expected in arrays.items():
        got = result.as_numpy(f"OUTPUT_{t}")
        assert got.shape == expected.shape, t
        if t == "STRING":
            assert [x.encode() if isinstance(x, str) else bytes(x) for x in got] == \
                list(expected), t
        else:
            assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes(), t


def test_bad_input_is_400_naming_the_tensor_and_server_keeps_serving(server):
    client = server.http_client()
    with pytest.raises(InferenceServerException) as err:
        client.infer("add_sub", [http_input("INPUT0", np.zeros(3, np.float32)),
                                 http_input("INPUT1", np.zeros(16, np.float32))])
    assert err.value.status() == "400" and "INPUT0" in err.value.message()
    test_readme_add_sub_snippet_prints_sums_and_differences(server)


def test_failed_initialize_leaves_model_unavailable_with_its_error(server):
    client = server.http_client()
    assert not client.is_model_ready("bad_init")
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["bad_init"]["state"] == "UNAVAILABLE"
    assert "token-7f3a" in index["bad_init"]["reason"]
    assert index["add_sub"]["state"] == "READY"
    assert "token-7f3a" in server.log_text()


def test_metrics_count_successes_exactly(server):
    def success() -> float:
        text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith('nv_inference_request_success{model="sleepy",version="1"}'):
                return float(line.split()[-1])
        raise AssertionError("no sleepy success counter")

    before = success()
    for _ in range(3):
        sleepy(server.http_client(), 0)
    assert success() == before + 3


def test_an_execute_that_raises_is_a_backend_failure(server):
    def failures() -> dict[str, float]:
        text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
        prefix = 'nv_inference_request_failure{model="sleepy",reason="'
        return {line[len(prefix):].split('"')[0]: float(line.split()[-1])
                for line in text.splitlines() if line.startswith(prefix)}

    before = failures()
    with pytest.raises(InferenceServerException, match="sleep length must be non-negative"):
        sleepy(server.http_client(), -1)
    assert failures() == {**before, "BACKEND": before["BACKEND"] + 1}


def test_killed_stub_fails_its_request_then_is_replaced(server):
    client = server.http_client()
    pid = sleepy(client, 0)
    errors = []

    def slow_call() -> None:
        try:
            sleepy(server.http_client(), 5000)
        except InferenceServerException as exc:
            errors.append(exc)

    caller = threading.Thread(target=slow_call)
    caller.start()
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    caller.join(20)
    assert not caller.is_alive()
    assert errors, "the request in flight when the stub died must get an error"
    message = errors[0].message()
    assert "sleepy_0_0" in message and "signal 9" in message and "sleepy" in message
    new_pid = sleepy(client, 0)
    assert new_pid != pid


def test_sigint_runs_finalize_and_leaves_no_shm(tmp_path):
    marker = tmp_path / "finalized.txt"
    os.environ["PBSERVE_TEST_FINALIZE_MARKER"] = str(marker)
    try:
        with running_server(TEST_MODELS, log_path=tmp_path / "log", ready_path=LIVE) as srv:
            pid = sleepy(srv.http_client(), 0)
            server_pid = srv.pid
        assert srv.proc.returncode == 0
    finally:
        del os.environ["PBSERVE_TEST_FINALIZE_MARKER"]
    assert marker.read_text() == f"finalized {pid}\n"
    assert entries_with_prefix(f"/pbserve-{server_pid}-") == []


def test_killed_server_stubs_exit_and_next_start_removes_their_shm(tmp_path):
    with running_server(TEST_MODELS, log_path=tmp_path / "a.log", ready_path=LIVE) as first:
        stub_pid = sleepy(first.http_client(), 0)
        os.kill(first.pid, signal.SIGKILL)
        first.proc.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(f"/proc/{stub_pid}"):
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{stub_pid}"), "the stub outlived its parent"
        # A SIGKILLed server cannot clean up: its queues stay until some pbserve starts
        # (any start sweeps dead owners' names, so another one may already have).
        with running_server(TEST_MODELS, log_path=tmp_path / "b.log", ready_path=LIVE):
            assert entries_with_prefix(f"/pbserve-{first.pid}-") == []


def test_statistics_extension_counts_requests_and_executions(server):
    client = server.http_client()
    before = client.get_inference_statistics("sleepy")["model_stats"][0]
    for _ in range(2):
        sleepy(client, 0)
    after = client.get_inference_statistics("sleepy")["model_stats"][0]
    assert after["name"] == "sleepy" and after["version"] == "1"
    assert int(after["inference_count"]) == int(before.get("inference_count", 0)) + 2
    assert int(after["execution_count"]) == int(before.get("execution_count", 0)) + 2
    success = after["inference_stats"]["success"]
    assert int(success["count"]) == int(before["inference_stats"]["success"]["count"]) + 2
    assert int(success["ns"]) > 0
    grpc_stats = server.grpc_client().get_inference_statistics("sleepy", as_json=True)
    assert grpc_stats["model_stats"][0]["inference_count"] == str(after["inference_count"])


def test_large_identity_answers_from_its_input_block_and_frees_it(server):
    """Inputs of 64 KiB and more may come back as outputs without a copy: the values
    must be right, and the lent block must be freed with the response."""
    client = server.http_client()
    prefix = f"pbserve-{server.pid}-"

    def shm_bytes() -> int:
        return sum(os.stat(f"/dev/shm/{n}").st_size for n in os.listdir("/dev/shm")
                   if n.startswith(prefix))

    def echo(x: np.ndarray) -> np.ndarray:
        result = client.infer("identity", [http_input("INPUT_FP32", x)])
        return result.as_numpy("OUTPUT_FP32")

    x = np.random.default_rng(7).random(64 * 1024, dtype=np.float32)  # 256 KiB
    for _ in range(10):
        np.testing.assert_array_equal(echo(x), x)
    time.sleep(0.1)
    before = shm_bytes()
    for i in range(200):
        y = x + i
        np.testing.assert_array_equal(echo(y), y)
    time.sleep(0.1)
    assert shm_bytes() == before


def test_a_failed_restart_is_tried_again_and_queued_requests_wait_for_it(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(Path(__file__).resolve().parents[1] / "models_restart", repo)
    marker = repo / "flaky_init" / "fail_init"
    with running_server(repo, log_path=tmp_path / "log") as srv:
        def call() -> int:  # a client per call: they are used from two threads
            result = srv.http_client().infer("flaky_init",
                                             [http_input("X", np.array([0], np.int32))])
            return int(result.as_numpy("PID")[0])

        pid = call()
        marker.touch()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while "restart of 'flaky_init_0' failed" not in srv.log_text():
            assert time.monotonic() < deadline, "the restart did not fail as it should"
            time.sleep(0.05)
        answer: dict = {}
        waiter = threading.Thread(target=lambda: answer.setdefault("pid", call()))
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive(), "the queued request must wait for a working instance"
        marker.unlink()
        waiter.join(30)
        assert answer.get("pid") not in (None, pid)


def test_triton_grpc_error_header_ends_the_stream_with_the_errors_status(server):
    """Triton's `triton_grpc_error: true` stream header: a model's error ends the stream
    with a gRPC status instead of arriving as an error response inside it."""
    import queue

    from client_inputs import grpc_input

    for header, expected in ((True, "StatusCode.INTERNAL"), (False, None)):
        client = server.grpc_client()
        results: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put(error),
                            headers={"triton_grpc_error": "true"} if header else None)
        client.async_stream_infer("sleepy", [grpc_input("SLEEP_MS", np.array([-1], np.int32))])
        error = results.get(timeout=20)
        client.stop_stream()
        assert isinstance(error, InferenceServerException)
        assert "sleep length must be non-negative" in error.message()
        assert error.status() == expected
