"""Model control modes and where a model's configuration comes from (docs/configuration.md)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import running_server

TEST_MODELS = Path(__file__).resolve().parents[1] / "models"
IDENTITY_CONFIG = """
name: "{name}"
backend: "python"
{extra}
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""
IDENTITY_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""
AUTO_COMPLETE_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [-1]})
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]})
        config.set_max_batch_size(16)
        return config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""


def write_model(repo: Path, name: str, extra: str = "", config: bool = True,
                code: str = IDENTITY_MODEL) -> Path:
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    if config:
        (repo / name / "config.pbtxt").write_text(IDENTITY_CONFIG.format(name=name, extra=extra))
    (repo / name / "1" / "model.py").write_text(code)
    return repo / name


def wait_until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def test_precedence_defaults_then_config_then_auto_complete_then_load_override(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "plain")                                      # sets neither field
    write_model(repo, "own_batch", extra="max_batch_size: 2")       # config.pbtxt wins
    write_model(repo, "auto", config=False, code=AUTO_COMPLETE_MODEL)
    write_model(repo, "overridden", extra="max_batch_size: 2")
    defaults = tmp_path / "defaults.pbtxt"
    defaults.write_text("max_batch_size: 8\n"
                        "dynamic_batching { max_queue_delay_microseconds: 1234 }\n")
    args = ["--model-control-mode", "explicit", "--load-model", "*",
            "--model-config-defaults", str(defaults)]
    with running_server(repo, args=args, log_path=tmp_path / "log") as server:
        client = server.http_client()
        plain = client.get_model_config("plain")
        assert plain["max_batch_size"] == 8                              # row 1
        assert plain["dynamic_batching"]["max_queue_delay_microseconds"] == 1234
        assert client.get_model_config("own_batch")["max_batch_size"] == 2   # row 2 over 1
        auto = client.get_model_config("auto")                           # row 3
        assert [i["name"] for i in auto["input"]] == ["X"]
        assert auto["max_batch_size"] == 16
        assert auto["dynamic_batching"]["max_queue_delay_microseconds"] == 1234
        override = {"max_batch_size": 4, "backend": "python",
                    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1]}],
                    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]}]}
        client.load_model("overridden", config=json.dumps(override))     # row 4 over 2
        assert client.get_model_config("overridden")["max_batch_size"] == 4
        override["max_batch_size"] = 6                                   # the gRPC way
        server.grpc_client().load_model("overridden", config=json.dumps(override))
        assert client.get_model_config("overridden")["max_batch_size"] == 6
        x = np.ones((1, 3), np.float32)
        tensor = httpclient.InferInput("X", [1, 3], "FP32")
        tensor.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("overridden", [tensor]).as_numpy("Y"), x)


def test_backend_config_default_max_batch_size(tmp_path):
    write_model(tmp_path, "plain")
    args = ["--backend-config", "python,default-max-batch-size=5"]
    with running_server(tmp_path, args=args, log_path=tmp_path / "log") as server:
        assert server.http_client().get_model_config("plain")["max_batch_size"] == 5


def test_explicit_mode_loads_only_the_named_models(tmp_path):
    write_model(tmp_path, "wanted")
    write_model(tmp_path, "other")
    args = ["--model-control-mode", "explicit", "--load-model", "wanted"]
    with running_server(tmp_path, args=args, log_path=tmp_path / "log") as server:
        client = server.http_client()
        assert client.is_model_ready("wanted") and not client.is_model_ready("other")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["other"] == {"name": "other"}


def test_poll_mode_follows_the_repository_without_api_calls(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "first")
    args = ["--model-control-mode", "poll", "--repository-poll-secs", "0.2"]
    with running_server(repo, args=args, log_path=tmp_path / "log") as server:
        client = server.http_client()
        assert client.get_model_config("first")["max_batch_size"] == 0
        # an edited config.pbtxt is picked up without a restart
        write_model(repo, "first", extra="max_batch_size: 3")
        wait_until(lambda: client.get_model_config("first")["max_batch_size"] == 3)
        # a new model appears, a removed one goes
        write_model(repo, "second")
        wait_until(lambda: client.is_model_ready("second"))
        shutil.rmtree(repo / "first")
        wait_until(lambda: not client.is_model_ready("first"))
        with pytest.raises(InferenceServerException) as err:
            client.load_model("second")
        assert "polling is enabled" in err.value.message()


def test_unload_waits_for_in_flight_requests(tmp_path):
    shutil.copytree(TEST_MODELS / "sleepy", tmp_path / "sleepy")
    args = ["--model-control-mode", "explicit", "--load-model", "sleepy"]
    with running_server(tmp_path, args=args, log_path=tmp_path / "log") as server:
        outcome = {}

        def slow_request() -> None:
            client = server.http_client()
            tensor = httpclient.InferInput("SLEEP_MS", [1], "INT32")
            tensor.set_data_from_numpy(np.array([1500], np.int32))
            try:
                outcome["pid"] = int(client.infer("sleepy", [tensor]).as_numpy("PID")[0])
            except InferenceServerException as exc:
                outcome["error"] = exc.message()

        caller = threading.Thread(target=slow_request)
        caller.start()
        time.sleep(0.5)
        request = urllib.request.Request(
            f"http://{server.http_url}/v2/repository/models/sleepy/unload", data=b"{}",
            method="POST")
        urllib.request.urlopen(request, timeout=30).read()
        caller.join(30)
        assert "pid" in outcome, outcome
        assert not server.http_client().is_model_ready("sleepy")


DOUBLING_MODEL = IDENTITY_MODEL.replace(".as_numpy())", ".as_numpy() * 2)")
OVERRIDE_CONFIG = json.dumps({
    "backend": "python",
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]}]})


def override_dirs(server) -> list[Path]:
    """The directories the server wrote a load request's files to (file_override.py)."""
    return sorted(Path(tempfile.gettempdir()).glob(f"pbserve-model-{server.pid}-*"))


def infer_x(client, model: str) -> np.ndarray:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    tensor = module.InferInput("X", [3], "FP32")
    tensor.set_data_from_numpy(np.array([1, 2, 3], np.float32))
    return client.infer(model, [tensor]).as_numpy("Y")


def test_load_with_files_serves_them_until_unloaded_or_reloaded(tmp_path):
    write_model(tmp_path, "ident")
    args = ["--model-control-mode", "explicit", "--load-model", "ident"]
    files = {"file:1/model.py": DOUBLING_MODEL.encode()}
    with running_server(tmp_path, args=args, log_path=tmp_path / "log") as server:
        client = server.http_client()
        # a model that no repository holds
        client.load_model("fresh", config=OVERRIDE_CONFIG, files=files)
        assert infer_x(client, "fresh").tolist() == [2, 4, 6]
        assert len(override_dirs(server)) == 1
        # the files win over the repository's model of the same name ...
        client.load_model("ident", config=OVERRIDE_CONFIG, files=files)
        assert infer_x(client, "ident").tolist() == [2, 4, 6]
        assert len(override_dirs(server)) == 2
        # ... until a load without files reloads it from the repository
        client.load_model("ident")
        assert infer_x(client, "ident").tolist() == [1, 2, 3]
        assert len(override_dirs(server)) == 1
        client.unload_model("fresh")
        wait_until(lambda: not override_dirs(server))
        assert not client.is_model_ready("fresh")


def test_load_with_files_refuses_what_triton_refuses_and_writes_nothing(tmp_path):
    args = ["--model-control-mode", "explicit"]
    code = DOUBLING_MODEL.encode()
    escaped = Path(tempfile.gettempdir()) / f"escaped-{tmp_path.name}.py"
    with running_server(tmp_path, args=args, log_path=tmp_path / "log") as server:
        http, grpc = server.http_client(), server.grpc_client()
        refusals = [
            (grpc, dict(files={"file:1/model.py": code}),
             "Load parameter 'config' must be specified for model file override"),
            (http, dict(config=OVERRIDE_CONFIG, files={f"file:../{escaped.name}": b"x"}),
             "must stay within model directory"),
            (http, dict(config=OVERRIDE_CONFIG, files={"file:1": b"x", "file:1/model.py": code}),
             "directory has been created as a file"),
        ]
        for client, kwargs, message in refusals:
            with pytest.raises(InferenceServerException) as err:
                client.load_model("m", **kwargs)
            assert message in err.value.message()
        assert not escaped.exists() and not override_dirs(server)
        assert all(m["name"] != "m" for m in http.get_model_repository_index())
        # the same load with its config works, over gRPC too
        grpc.load_model("m", config=OVERRIDE_CONFIG, files={"file:1/model.py": code})
        assert infer_x(grpc, "m").tolist() == [2, 4, 6]
        pid = server.pid
    assert not list(Path(tempfile.gettempdir()).glob(f"pbserve-model-{pid}-*"))


def test_files_a_killed_server_was_loaded_from_go_when_the_next_starts(tmp_path):
    args = ["--model-control-mode", "explicit"]
    with running_server(tmp_path, args=args, log_path=tmp_path / "log") as server:
        server.http_client().load_model("m", config=OVERRIDE_CONFIG,
                                        files={"file:1/model.py": DOUBLING_MODEL.encode()})
        left = override_dirs(server)
        assert len(left) == 1
        os.killpg(server.pid, signal.SIGKILL)
        server.proc.wait(10)
    assert left[0].exists()
    with running_server(tmp_path, args=args, log_path=tmp_path / "log2"):
        assert not left[0].exists()
