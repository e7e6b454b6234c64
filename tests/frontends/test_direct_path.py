"""Frontend processes send a default-scheduled model's requests to its stubs themselves
(pbserve/frontends/direct.py), driven as a user would: a real server with
`--frontend-processes 2`, real stubs, tritonclient and raw sockets."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import queue
import re

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pbserve.testing import parent_of, running_server, stub_pids
from client_inputs import send_and_hang_up
from model_files import DOUBLE_IO, DOUBLE_MODEL
from polling import wait_for

ROOT = Path(__file__).resolve().parents[2]


AGAIN = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        return [None] * len(requests)
"""

TWICE = """
import triton_python_backend_utils as pb_utils


def identity(x):
    response = pb_utils.InferenceRequest(
        model_name="identity", requested_output_names=["OUTPUT_FP32"],
        inputs=[pb_utils.Tensor("INPUT_FP32", x)]).exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, "OUTPUT_FP32").as_numpy()


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", identity(identity(pb_utils.get_input_tensor_by_name(r, "X").as_numpy())))])
            for r in requests]
"""

UNARY_TO_STREAM = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        prompt = pb_utils.Tensor("PROMPT", np.array([b"hi"], dtype=np.object_))
        answer = pb_utils.InferenceRequest(
            model_name="async_stream", inputs=[prompt],
            requested_output_names=["TEXT"]).exec()
        text = answer.error().message() if answer.has_error() else "no error"
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "ERROR", np.array([text.encode()], dtype=np.object_))]) for _ in requests]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("direct")
    repo = tmp / "repo"
    for name in ("sleepy", "cancel_probe", "cancel_coroutine", "coroutine_raises",
                 "bls_to_sleepy"):
        shutil.copytree(ROOT / "tests/models" / name, repo / name)
    shutil.copytree(ROOT / "models/examples/identity", repo / "identity")
    shutil.copytree(ROOT / "models/examples/async_stream", repo / "async_stream")
    config = repo / "async_stream" / "config.pbtxt"
    config.write_text(config.read_text().replace('"50"', '"1"'))  # 1 ms a chunk
    (repo / "double" / "1").mkdir(parents=True)  # batched, without a batcher
    (repo / "double" / "config.pbtxt").write_text('backend: "python"\n' + DOUBLE_IO)
    (repo / "double" / "1" / "model.py").write_text(DOUBLE_MODEL)
    (repo / "again" / "1").mkdir(parents=True)  # asks for RESCHEDULE, without a batcher
    (repo / "again" / "config.pbtxt").write_text(
        'backend: "python"\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')
    (repo / "again" / "1" / "model.py").write_text(AGAIN)
    (repo / "twice" / "1").mkdir(parents=True)  # two BLS calls to identity
    (repo / "twice" / "config.pbtxt").write_text(
        'backend: "python"\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')
    (repo / "twice" / "1" / "model.py").write_text(TWICE)
    (repo / "unary_to_stream" / "1").mkdir(parents=True)  # exec() on a decoupled model
    (repo / "unary_to_stream" / "config.pbtxt").write_text(
        'backend: "python"\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "ERROR" data_type: TYPE_STRING dims: [ 1 ] } ]\n')
    (repo / "unary_to_stream" / "1" / "model.py").write_text(UNARY_TO_STREAM)
    with running_server(repo, log_path=tmp / "server.log",
                        args=["--frontend-processes", "2", "--model-control-mode",
                              "explicit", "--load-model", "*"]) as srv:
        yield srv


def _identity_inputs(x: np.ndarray) -> list:
    tensor = httpclient.InferInput("INPUT_FP32", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return [tensor]


def _sleepy(ms: int) -> list:
    tensor = httpclient.InferInput("SLEEP_MS", [1], "INT32")
    tensor.set_data_from_numpy(np.array([ms], np.int32))
    return [tensor]


def _count(client, model: str) -> int:
    (entry,) = client.get_inference_statistics(model)["model_stats"]
    return int(entry["inference_count"])


def test_requests_are_answered_while_the_core_process_is_stopped(server):
    """The core is out of the data path: with the server's own process stopped
    (SIGSTOP), a frontend that knows the model's stubs still has its requests answered;
    what they add to the statistics reaches the core once it runs again."""
    client = server.http_client()
    x = np.arange(16, dtype=np.float32)
    before = _count(client, "identity")
    client.infer("identity", _identity_inputs(x))  # the frontend learns the route
    os.kill(server.pid, signal.SIGSTOP)
    try:
        for _ in range(5):  # within the route's second (frontends/direct.py ROUTE_TTL_S)
            result = client.infer("identity", _identity_inputs(x))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT_FP32"), x)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    wait_for(lambda: _count(client, "identity") == before + 6, "the statistics", 10)
    (entry,) = client.get_inference_statistics("identity")["model_stats"]
    assert int(entry["execution_count"]) >= 6
    assert int(entry["inference_stats"]["success"]["count"]) >= 6


def test_a_batched_requests_statistics_count_its_batch_size(server):
    client = server.http_client()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor = httpclient.InferInput("X", [3, 4], "FP32")
    tensor.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("double", [tensor]).as_numpy("Y"), x * 2)

    def counted() -> bool:
        (entry,) = client.get_inference_statistics("double")["model_stats"]
        return int(entry["inference_count"]) == 3
    wait_for(counted, "the statistics", 10)
    (entry,) = client.get_inference_statistics("double")["model_stats"]
    assert int(entry["execution_count"]) == 1
    (batch,) = entry["batch_stats"]
    assert int(batch["batch_size"]) == 3 and int(batch["compute_infer"]["count"]) == 1


def test_bad_input_is_refused_by_the_frontend_in_tritons_words(server):
    client = server.http_client()
    tensor = httpclient.InferInput("INPUT_FP32", [16], "INT32")
    tensor.set_data_from_numpy(np.arange(16, dtype=np.int32))
    with pytest.raises(Exception, match="model 'identity' expects 'FP32'"):
        client.infer("identity", [tensor])
    result = client.infer("identity", _identity_inputs(np.ones(4, np.float32)))
    assert result.as_numpy("OUTPUT_FP32").tolist() == [1, 1, 1, 1]


def test_a_reschedule_without_a_sequence_batcher_is_refused_as_the_core_refuses_it(server):
    tensor = httpclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, np.float32))
    with pytest.raises(Exception, match="RELEASE_RESCHEDULE, while the model is not "
                                        "configured to handle such a flag"):
        server.http_client().infer("again", [tensor])


def test_a_stub_killed_under_a_request_fails_it_and_its_successor_serves(server):
    client = server.http_client(concurrency=2)
    first = int(client.infer("sleepy", _sleepy(0)).as_numpy("PID")[0])
    pending = client.async_infer("sleepy", _sleepy(5000))
    time.sleep(0.5)  # the model sleeps now
    os.kill(first, signal.SIGKILL)
    with pytest.raises(Exception, match="is not healthy"):
        pending.get_result()

    def served_by_another() -> bool:
        try:
            return int(client.infer("sleepy", _sleepy(0)).as_numpy("PID")[0]) != first
        except Exception:  # restarting
            return False
    wait_for(served_by_another, "a new stub", 30)
    assert first not in stub_pids(server.pid)


def test_a_request_sent_once_a_killed_stubs_error_came_waits_for_its_successor(server):
    """The frontend sees the stub end first (its pidfd); the core learns it from the
    zygote, stopped here for a while. The error comes once the core knows, so the next
    request finds the instance restarting and waits for it, as with one process; it
    is not sent to the dead stub's route, which the core gave until it knew."""
    client = server.http_client(concurrency=2)
    first = int(client.infer("sleepy", _sleepy(0)).as_numpy("PID")[0])
    zygote = parent_of(first)
    pending = client.async_infer("sleepy", _sleepy(5000))
    time.sleep(0.5)  # the model sleeps now
    os.kill(zygote, signal.SIGSTOP)
    resume = threading.Timer(1.5, os.kill, (zygote, signal.SIGCONT))
    resume.start()  # meanwhile the frontend has seen the stub end; the core cannot
    try:
        os.kill(first, signal.SIGKILL)
        with pytest.raises(Exception, match="is not healthy"):
            pending.get_result()
        assert int(client.infer("sleepy", _sleepy(0)).as_numpy("PID")[0]) != first
    finally:
        resume.join()


def test_a_client_that_leaves_cancels_the_request_in_the_model(server, tmp_path):
    marker = tmp_path / "seen.json"
    send_and_hang_up(server, "cancel_probe", marker)
    wait_for(lambda: marker.exists() and marker.read_text().endswith("}"),
             "the model's answer", 15)  # written whole
    assert json.loads(marker.read_text())["cancelled"] is True


def test_an_unload_waits_for_a_direct_request_and_the_model_is_gone_after(server):
    client = server.http_client()  # one connection: one frontend, which knows the route
    client.infer("sleepy", _sleepy(0))
    pending = client.async_infer("sleepy", _sleepy(1000))
    time.sleep(0.3)  # it runs now
    server.http_client().unload_model("sleepy")
    assert pending.get_result().as_numpy("PID")[0] > 0
    with pytest.raises(Exception, match="sleepy"):
        client.infer("sleepy", _sleepy(0))
    client.load_model("sleepy")
    assert client.infer("sleepy", _sleepy(0)).as_numpy("PID")[0] > 0


def _stream(client, model: str, inputs: list, count: int, timeout: float = 10,
            cancel: bool = False) -> list:
    """`count` results of one request on `client`'s stream: (result, error) pairs; the
    stream is then closed (`cancel`: with the request cancelled)."""
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        client.async_stream_infer(model, inputs)
        return [got.get(timeout=timeout) for _ in range(count)]
    finally:
        client.stop_stream(cancel_requests=cancel)


def _prompt(chunks: int) -> list:
    prompt = grpcclient.InferInput("PROMPT", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([b"hi"], dtype=np.object_))
    count = grpcclient.InferInput("CHUNKS", [1], "INT32")
    count.set_data_from_numpy(np.array([chunks], np.int32))
    return [prompt, count]


def test_a_decoupled_stream_is_answered_while_the_core_process_is_stopped(server):
    """A decoupled model's responses go from its stub to the frontend that sent the
    request; what they add to the response statistics reaches the core after."""
    client = server.grpc_client()
    assert [e for _, e in _stream(client, "async_stream", _prompt(1), 1)] == [None]
    os.kill(server.pid, signal.SIGSTOP)
    try:
        results = _stream(client, "async_stream", _prompt(3), 3)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert [e for _, e in results] == [None] * 3
    assert [r.as_numpy("TEXT")[0] for r, _ in results] == [
        f"chunk {i}/3 of 'hi' ".encode() for i in (1, 2, 3)]

    def statistics() -> dict:
        (entry,) = server.http_client().get_inference_statistics(
            "async_stream")["model_stats"]
        return entry
    wait_for(lambda: int(statistics()["inference_stats"]["success"]["count"]) == 2,
             "the statistics", 10)
    responses = statistics()["response_stats"]
    assert int(responses["0"]["success"]["count"]) == 2  # both requests' first
    assert int(responses["2"]["success"]["count"]) == 1
    assert int(responses["3"]["empty_response"]["count"]) == 1  # the final flag alone


def test_a_coroutine_that_raises_ends_its_stream_with_the_error(server):
    client = server.grpc_client()
    fail = grpcclient.InferInput("FAIL", [1], "BOOL")
    fail.set_data_from_numpy(np.array([True]))
    (first, none), (_, error) = _stream(client, "coroutine_raises", [fail], 2)
    assert none is None and first.as_numpy("PID")[0] in stub_pids(server.pid)
    assert "coroutine_raises: failing on purpose" in str(error)


def test_a_stream_the_client_closes_cancels_the_coroutine(server, tmp_path):
    marker = tmp_path / "seen.json"
    tensor = grpcclient.InferInput("MARKER", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([str(marker).encode()], dtype=np.object_))
    client = server.grpc_client()
    ((started, error),) = _stream(client, "cancel_coroutine", [tensor], 1, cancel=True)
    assert error is None and started.as_numpy("STARTED")[0]
    wait_for(marker.exists, "the coroutine's cancellation", 15)


def test_bls_calls_go_from_stub_to_stub_while_the_core_process_is_stopped(server):
    """A BLS call from a stub to a model the default scheduler serves goes to the
    callee's stub directly (stub/direct_bls.py): with the core stopped, a frontend that
    knows the caller's route and a caller that knows the callee's are answered; the
    calls count in the callee's statistics once the core runs again."""
    client = server.http_client()
    x = np.arange(8, dtype=np.float32)
    tensor = httpclient.InferInput("X", [8], "FP32")
    tensor.set_data_from_numpy(x)
    before = _count(client, "identity")
    np.testing.assert_array_equal(client.infer("twice", [tensor]).as_numpy("Y"), x)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        for _ in range(3):  # within the routes' second (ROUTE_TTL_S)
            np.testing.assert_array_equal(client.infer("twice", [tensor]).as_numpy("Y"), x)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    wait_for(lambda: _count(client, "identity") == before + 8, "the callee's statistics", 10)


def _caller_queues() -> set[str]:
    """The queues of direct BLS calls in /dev/shm (stub.stub.caller_queue_names)."""
    return {name for name in os.listdir("/dev/shm") if re.search(r"-[kl]\d+$", name)}


def _stub_of(server, instance: str) -> int:
    """The pid of the stub of model instance `instance` (its command line names it)."""
    (pid,) = [pid for pid in stub_pids(server.pid)
              if f"\0--name\0{instance}\0".encode() in Path(f"/proc/{pid}/cmdline").read_bytes()]
    return pid


def test_a_callee_killed_under_a_direct_call_fails_it(server):
    client = server.http_client(concurrency=2)
    callee = int(client.infer("bls_to_sleepy", _sleepy(0)).as_numpy("PID")[0])
    assert callee == _stub_of(server, "sleepy_0_0")
    old = _caller_queues()
    assert old  # the direct call's pair
    pending = client.async_infer("bls_to_sleepy", _sleepy(5000))
    time.sleep(0.5)  # sleepy sleeps now, its caller waits
    os.kill(callee, signal.SIGKILL)
    with pytest.raises(Exception, match="is not healthy"):
        pending.get_result()

    def served_by_another() -> bool:
        try:
            return int(client.infer("bls_to_sleepy", _sleepy(0)).as_numpy("PID")[0]) != callee
        except Exception:  # restarting
            return False
    wait_for(served_by_another, "a new callee", 30)
    # the dead callee's queues went with it; its successor has a pair with the caller
    now = _caller_queues()
    assert len(old - now) == 2 and len(now - old) == 2


def test_a_dead_callers_queues_go_and_its_successor_calls(server):
    client = server.http_client()
    client.infer("bls_to_sleepy", _sleepy(0))
    old = _caller_queues()
    caller = _stub_of(server, "bls_to_sleepy_0_0")
    os.kill(caller, signal.SIGKILL)
    wait_for(lambda: len(old - _caller_queues()) == 2, "the dead caller's queues to go", 10)

    def served() -> bool:
        try:
            return int(client.infer("bls_to_sleepy", _sleepy(0)).as_numpy("PID")[0]) > 0
        except Exception:  # restarting
            return False
    wait_for(served, "a new caller", 30)
    assert _caller_queues() and _stub_of(server, "bls_to_sleepy_0_0") != caller


def test_a_unary_call_to_a_decoupled_model_is_refused_in_tritons_words(server):
    """Not a direct call (its callee answers with a stream): the core refuses it."""
    tensor = httpclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, np.float32))
    result = server.http_client(network_timeout=20).infer("unary_to_stream", [tensor])
    assert "async_stream is using the decoupled" in result.as_numpy("ERROR")[0].decode()
