"""A built-in backend's load errors and log lines: a bad model file fails the load with
the error's type and text alone (the frames are pbserve's and its libraries', none the
model's own), and a line its model.py logs while auto-completing gets one heading."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

import backend_utils
import pbserve
import stub
from pbserve.testing import running_server

HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxruntime"))
HAS_TORCH = importlib.util.find_spec("torch") is not None
# pbserve's own code and installed packages: none may be named in what a client is told
OWN = [str(Path(package.__file__).resolve().parent) + os.sep
       for package in (pbserve, stub, backend_utils)] + ["site-packages"]
FP32_IO = """
input [{ name: "X", data_type: TYPE_FP32, dims: [4] }]
output [{ name: "Y", data_type: TYPE_FP32, dims: [4] }]
"""


def add_identity(version_dir: Path) -> None:
    """Y = X over [batch, 4] FP32: auto-complete fills max_batch_size (and logs it)."""
    from onnx import TensorProto, helper, save

    graph = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "identity",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                             ["batch", 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT,
                                                             ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(version_dir / "model.onnx"))


@pytest.fixture(scope="module")
def server_run(tmp_path_factory) -> dict:
    """The repository index's reasons and the server's log, of one run."""
    if not (HAS_ONNX or HAS_TORCH):
        pytest.skip("neither onnxruntime nor torch is installed")
    repo = tmp_path_factory.mktemp("repo")
    models = {}
    if HAS_ONNX:
        models["bad_onnx"] = ('backend: "onnxruntime"', "model.onnx")
        models["identity"] = ('backend: "onnxruntime"', None)
    if HAS_TORCH:
        models["bad_torchscript"] = ('backend: "pytorch"' + FP32_IO, "model.pt")
    for name, (config, bad_file) in models.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        if bad_file:
            (repo / name / "1" / bad_file).write_bytes(b"not a model\n")
        else:
            add_identity(repo / name / "1")
    log_path = tmp_path_factory.mktemp("log") / "server.log"
    with running_server(repo, log_path=log_path, ready_path="/v2/health/live") as server:
        index = server.http_client().get_model_repository_index()
        log = server.log_text()
    return {"reasons": {m["name"]: m.get("reason", "") for m in index}, "log": log}


def _entry(log: str, name: str) -> str:
    """The log's "load failed" entry for `name`, up to the next line with a heading."""
    return re.search(rf"load failed for model '{name}'.*?(?=\n[IWE]\d{{4}} |\Z)", log,
                     re.DOTALL)[0]


@pytest.mark.skipif(not HAS_ONNX, reason="onnxruntime is not installed")
def test_a_bad_onnx_file_is_told_without_pbserves_frames(server_run) -> None:
    for text in (server_run["reasons"]["bad_onnx"], _entry(server_run["log"], "bad_onnx")):
        assert "failed to load 'bad_onnx': auto_complete_config: InvalidProtobuf: " \
               "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from " in text, text
        assert "model.onnx failed:Protobuf parsing failed." in text, text
        assert "At:" not in text and not any(path in text for path in OWN), text


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_a_bad_torchscript_file_is_told_without_pbserves_frames(server_run) -> None:
    for text in (server_run["reasons"]["bad_torchscript"],
                 _entry(server_run["log"], "bad_torchscript")):
        assert "Internal: RuntimeError: PytorchStreamReader failed reading zip archive" \
               in text, text
        assert "At:" not in text and not any(path in text for path in OWN), text


@pytest.mark.skipif(not HAS_ONNX, reason="onnxruntime is not installed")
def test_a_line_logged_while_auto_completing_has_one_heading(server_run) -> None:
    """pb_utils.Logger writes it in glog's form to the stub's stderr (there is no log
    channel yet, as in Triton's stub): the server logs it at its level, heading once."""
    assert server_run["reasons"]["identity"] == ""  # loaded
    (line,) = [line for line in server_run["log"].splitlines()
               if "autofilled max_batch_size" in line]
    assert re.match(r"W\d{4} [\d:.]+ \d+ pbserve\.stub identity_0\] model\.py:\d+\] "
                    r"autofilled max_batch_size to 4 for model 'identity'", line), line
    assert len(re.findall(r"[IWE]\d{4} \d\d:\d\d", line)) == 1, line
