"""Frontend processes run an ensemble's requests themselves (pbserve/frontends/
ensembles.py): each step goes straight to its model's stubs where the core offers that,
through the core otherwise. Driven as a user would: a real server with
`--frontend-processes 2`, real stubs, tritonclient."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pbserve.testing import running_server
from client_inputs import send_and_hang_up
from model_files import DOUBLE_IO, DOUBLE_MODEL
from polling import wait_for

ROOT = Path(__file__).resolve().parents[2]

FAILS = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise pb_utils.TritonModelException("fails on purpose")
"""


def _model(repo: Path, name: str, config: str, source: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(source)


def _ensemble(repo: Path, name: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'platform: "ensemble"\n{config}')


def _chain(model: str, inp: str, out: str, first: str, last: str, steps: int) -> str:
    """Ensemble steps: `steps` calls of `model` in a row, from `first` to `last`."""
    names = [first] + [f"t{i}" for i in range(1, steps)] + [last]
    return "ensemble_scheduling { step [ " + ", ".join(
        f'{{ model_name: "{model}" model_version: -1 input_map {{ key: "{inp}" '
        f'value: "{a}" }} output_map {{ key: "{out}" value: "{b}" }} }}'
        for a, b in zip(names, names[1:])) + " ] }\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ensembles")
    repo = tmp / "repo"
    shutil.copytree(ROOT / "models/examples/identity", repo / "identity")
    shutil.copytree(ROOT / "models/examples/async_stream", repo / "async_stream")
    config = repo / "async_stream" / "config.pbtxt"
    config.write_text(config.read_text().replace('"50"', '"1"'))  # 1 ms a chunk
    _model(repo, "double", 'backend: "python"\n' + DOUBLE_IO, DOUBLE_MODEL)  # direct
    _model(repo, "double_batched", 'backend: "python"\n' + DOUBLE_IO  # through the core
           + "dynamic_batching { max_queue_delay_microseconds: 100 }\n", DOUBLE_MODEL)
    _model(repo, "fails", 'backend: "python"\n' + DOUBLE_IO, FAILS)
    fp32 = ('input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')
    _ensemble(repo, "ens3", fp32 + _chain("identity", "INPUT_FP32", "OUTPUT_FP32",
                                          "IN", "OUT", 3))
    io = DOUBLE_IO.replace('"X"', '"IN"').replace('"Y"', '"OUT"')
    _ensemble(repo, "ens_mixed", io + (
        'ensemble_scheduling { step [ '
        '{ model_name: "double" model_version: -1 input_map { key: "X" value: "IN" } '
        'output_map { key: "Y" value: "a" } }, '
        '{ model_name: "double_batched" model_version: -1 input_map { key: "X" value: "a" }'
        ' output_map { key: "Y" value: "b" } }, '
        '{ model_name: "double" model_version: -1 input_map { key: "X" value: "b" } '
        'output_map { key: "Y" value: "OUT" } } ] }\n'))
    _ensemble(repo, "ens_fails", io + _chain("fails", "X", "Y", "IN", "OUT", 1))
    shutil.copytree(ROOT / "tests/models/cancel_probe", repo / "cancel_probe")
    _ensemble(repo, "ens_cancel", (
        'input [ { name: "M" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "S" data_type: TYPE_BOOL dims: [ 1 ] } ]\n'
        + _chain("cancel_probe", "MARKER", "SEEN", "M", "S", 1)))
    _ensemble(repo, "ens_stream", (
        'input [ { name: "P" data_type: TYPE_STRING dims: [ 1 ] }, '
        '{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "T" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "async_stream" model_version: -1 '
        'input_map { key: "PROMPT" value: "P" } input_map { key: "CHUNKS" value: "N" } '
        'output_map { key: "TEXT" value: "T" } } ] }\n'))
    with running_server(repo, log_path=tmp / "server.log",
                        args=["--frontend-processes", "2"]) as srv:
        yield srv


def _input(name: str, x: np.ndarray) -> list:
    tensor = httpclient.InferInput(name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return [tensor]


def _stats(client, model: str) -> dict:
    (entry,) = client.get_inference_statistics(model)["model_stats"]
    return entry


def _successes(client, model: str) -> int:
    return int(_stats(client, model)["inference_stats"]["success"]["count"])


def test_an_ensemble_is_answered_while_the_core_process_is_stopped(server):
    """Its graph runs in the frontend and its steps go to identity's stub directly:
    with the server's own process stopped (SIGSTOP), a frontend that knows the routes
    answers; the ensemble's and the steps' statistics reach the core after."""
    client = server.http_client()
    x = np.arange(16, dtype=np.float32)
    steps = _successes(client, "identity")
    np.testing.assert_array_equal(client.infer("ens3", _input("IN", x)).as_numpy("OUT"), x)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        for i in range(4):  # within the routes' second (frontends/direct.py ROUTE_TTL_S)
            y = x + i
            np.testing.assert_array_equal(
                client.infer("ens3", _input("IN", y)).as_numpy("OUT"), y)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    wait_for(lambda: _successes(client, "ens3") == 5, "the ensemble's statistics", 10)
    wait_for(lambda: _successes(client, "identity") == steps + 15, "the steps'", 10)
    entry = _stats(client, "ens3")
    assert int(entry["execution_count"]) == 5 and int(entry["inference_count"]) == 5
    (batch,) = entry["batch_stats"]
    assert int(batch["batch_size"]) == 1 and int(batch["compute_infer"]["count"]) == 5


def test_a_step_through_the_core_hands_its_outputs_on(server):
    """A step whose model the core schedules (a dynamic batcher) goes through the core
    from the frontend's graph; its outputs, in the core's message, feed the next step."""
    client = server.http_client()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    result = client.infer("ens_mixed", _input("IN", x))
    np.testing.assert_array_equal(result.as_numpy("OUT"), x * 8)
    wait_for(lambda: int(_stats(client, "ens_mixed")["inference_count"]) == 3,
             "the batch size in the statistics", 10)
    assert _successes(client, "double_batched") == 1


def test_a_failing_step_fails_the_request_in_the_cores_words(server):
    client = server.http_client()
    with pytest.raises(Exception, match="in ensemble 'ens_fails', .*fails on purpose"):
        client.infer("ens_fails", _input("IN", np.ones((1, 4), np.float32)))
    wait_for(lambda: int(_stats(client, "ens_fails")["inference_stats"]["fail"]["count"])
             == 1, "the failure in the statistics", 10)
    assert _successes(client, "ens_fails") == 0
    # the frontend refuses bad input against the ensemble's config, as the core does
    with pytest.raises(Exception, match="expects 'FP32'"):
        tensor = httpclient.InferInput("IN", [1, 4], "INT32")
        tensor.set_data_from_numpy(np.ones((1, 4), np.int32))
        client.infer("ens_fails", [tensor])


def test_a_decoupled_steps_stream_is_the_ensembles(server):
    prompt = grpcclient.InferInput("P", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([b"hi"], dtype=np.object_))
    count = grpcclient.InferInput("N", [1], "INT32")
    count.set_data_from_numpy(np.array([3], np.int32))
    got: queue.Queue = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        client.async_stream_infer("ens_stream", [prompt, count])
        results = [got.get(timeout=10) for _ in range(3)]
    finally:
        client.stop_stream()
    assert [e for _, e in results] == [None] * 3
    assert [r.as_numpy("T")[0] for r, _ in results] == [
        f"chunk {i}/3 of 'hi' ".encode() for i in (1, 2, 3)]
    prompt = httpclient.InferInput("P", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([b"hi"], dtype=np.object_))
    with pytest.raises(Exception, match="decoupled transaction policy"):
        server.http_client().infer("ens_stream", [prompt])  # a unary call: refused


def test_a_client_that_leaves_cancels_the_steps_and_counts_as_cancelled(server, tmp_path):
    """The frontend's graph is cancelled with its client: the step's model sees
    `is_cancelled()`, and the ensemble counts a CANCELED failure, as in the core."""
    marker = tmp_path / "seen.json"
    send_and_hang_up(server, "ens_cancel", marker, input_name="M")  # the step runs now
    wait_for(lambda: marker.exists() and marker.read_text().endswith("}"),
             "the step's answer", 15)  # written whole
    assert json.loads(marker.read_text())["cancelled"] is True

    def cancelled() -> bool:
        with urllib.request.urlopen(server.metrics_url) as r:
            text = r.read().decode()
        return 'nv_inference_request_failure{model="ens_cancel",reason="CANCELED",' \
            'version="1"} 1' in text
    wait_for(cancelled, "the ensemble's CANCELED failure", 10)
