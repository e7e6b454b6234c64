"""model_warmup (config.pbtxt): zero, random and file data, batch_size, count; run on the
instance before the model is READY; a failing sample fails the load with Triton's words."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import running_server
from tests.polling import wait_for

MODELS = Path(__file__).parents[1] / "models_ext"


def _repo(tmp_path: Path, *names: str) -> Path:
    repo = tmp_path / "repo"
    for name in names:
        shutil.copytree(MODELS / name, repo / name)
    return repo


def _report(client) -> list[list[dict]]:
    inputs = []
    for name, datatype, value in (("IN", "FP32", np.zeros((1, 3), np.float32)),
                                  ("TEXT", "BYTES", np.array([[b"report", b""]], object)),
                                  ("RAW", "UINT8", np.zeros((1, 4), np.uint8))):
        tensor = httpclient.InferInput(name, list(value.shape), datatype)
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    seen = client.infer("warmup_probe", inputs).as_numpy("SEEN")
    return json.loads(seen[0][0])


def test_warmup_samples_run_before_the_first_request(tmp_path):
    with running_server(_repo(tmp_path, "warmup_probe")) as server:
        batches = _report(server.http_client())
    # zeros: batch_size 2, count 3 -> three executions of two requests each
    zeros = {"shape": [1, 3], "in": [[0.0, 0.0, 0.0]], "text": [["", ""]],
             "raw": [[0, 0, 0, 0]]}
    assert batches[:3] == [[zeros, zeros]] * 3
    # random: once (count 0 means once); BYTES get zeros, so empty strings, as Triton
    [random] = batches[3]
    assert random["shape"] == [1, 3] and random["text"] == [["", ""]]
    # files: the model directory's warmup/ folder; RAW reads the first 4 of 6 bytes
    assert batches[4] == [{"shape": [1, 3], "in": [[1.5, 2.5, 3.5]],
                           "text": [["ab", "xyz"]], "raw": [[7, 8, 9, 10]]}]
    assert len(batches) == 5  # batch_size 0: skipped


def test_warmup_is_not_counted_in_statistics(tmp_path):
    with running_server(_repo(tmp_path, "warmup_probe")) as server:
        client = server.http_client()
        _report(client)
        [stats] = client.get_inference_statistics("warmup_probe")["model_stats"]
    assert stats["execution_count"] == 1 and stats["inference_count"] == 1


def test_the_model_is_not_ready_while_it_warms_up(tmp_path):
    repo = _repo(tmp_path, "warmup_gate")
    model_dir = repo / "warmup_gate"
    with running_server(repo, args=["--model-control-mode", "explicit"]) as server:
        client = server.http_client()
        errors = []
        loader = threading.Thread(target=lambda: _load(server, errors))
        loader.start()
        try:
            wait_for(lambda: (model_dir / "warming").exists(), "the warmup", 60)
            assert client.is_model_ready("warmup_gate") is False
        finally:
            (model_dir / "gate").touch()
            loader.join()
        assert errors == []
        assert client.is_model_ready("warmup_gate") is True
        tensor = httpclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([5], np.int32))
        assert client.infer("warmup_gate", [tensor]).as_numpy("OUT").tolist() == [1]


def _load(server, errors: list) -> None:
    try:
        server.http_client(network_timeout=120).load_model("warmup_gate")
    except Exception as exc:  # noqa: BLE001 - the test thread reports it
        errors.append(exc)


def test_a_failing_warmup_fails_the_load(tmp_path):
    repo = _repo(tmp_path, "warmup_fails")
    with running_server(repo, args=["--model-control-mode", "explicit"]) as server:
        client = server.http_client()
        with pytest.raises(InferenceServerException) as err:
            client.load_model("warmup_fails")
        message = err.value.message()
        assert message.startswith(
            "load failed for model 'warmup_fails': version 1 is at UNAVAILABLE state: "
            "Invalid argument: failed to run warmup sample 'must_fail': "), message
        assert "warmup refused" in message and message.endswith("; ")
        assert client.is_model_ready("warmup_fails") is False
        [entry] = client.get_model_repository_index()
        assert entry["state"] == "UNAVAILABLE" and "must_fail" in entry["reason"]


@pytest.mark.parametrize("warmup, message", [
    ({"name": "short", "batch_size": 1, "inputs": {"RAW": {
        "data_type": "TYPE_UINT8", "dims": [10], "input_data_file": "raw.bin"}}},
     "Invalid argument: warmup setting expects 10 bytes, but the data provided from "
     "raw.binonly has 6 bytes"),
    ({"name": "wild", "batch_size": 1, "inputs": {"IN": {
        "data_type": "TYPE_FP32", "dims": [-1], "zero_data": True}}},
     "Invalid argument: warmup setting expects all variable-size dimensions are specified "
     "for input 'IN'"),
    ({"name": "unset", "batch_size": 1, "inputs": {"IN": {
        "data_type": "TYPE_FP32", "dims": [3]}}},
     "Invalid argument: warmup setting expects input 'IN' to have input_data_type set"),
], ids=["file-too-short", "variable-dims", "no-data-type"])
def test_bad_warmup_settings_fail_the_load(tmp_path, warmup, message):
    repo = _repo(tmp_path, "warmup_probe")
    with running_server(repo, args=["--model-control-mode", "explicit"]) as server:
        client = server.http_client()
        config = _config_of(client, "warmup_probe")
        config["model_warmup"] = [warmup]
        with pytest.raises(InferenceServerException, match=message.replace("(", r"\(")):
            client.load_model("warmup_probe", config=json.dumps(config))


def _config_of(client, name: str) -> dict:
    client.load_model(name)
    config = client.get_model_config(name)
    client.unload_model(name)
    return config


def test_a_decoupled_model_warms_up_through_its_stream(tmp_path):
    """repeat answers a warmup request with one response per element, then the final
    flag: the warmup reads them all, and the model then serves."""
    repo = tmp_path / "repo"
    shutil.copytree(Path(__file__).parents[2] / "models" / "examples" / "repeat",
                    repo / "repeat")
    config = (repo / "repeat" / "config.pbtxt")
    config.write_text(config.read_text() + '''
model_warmup [ {
  name: "three" batch_size: 1 count: 2
  inputs { key: "IN" value: { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } }
} ]
''')
    with running_server(repo) as server:
        client = server.grpc_client()
        assert client.is_model_ready("repeat")
        assert client.get_model_config("repeat", as_json=True)["config"][
            "model_warmup"][0]["name"] == "three"
