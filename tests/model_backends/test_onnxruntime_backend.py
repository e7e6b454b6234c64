"""The built-in ONNX Runtime backend (pbserve/model_backends/onnxruntime): real ONNX graphs
made with the `onnx` package's helpers, served by a real server, driven by tritonclient."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as http
from tritonclient.utils import InferenceServerException

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from pbserve.testing import running_server  # noqa: E402
from add_mul_checks import check_add_mul, check_batched  # noqa: E402
from client_inputs import typed_input as inp  # noqa: E402
from model_files import save_graph, write  # noqa: E402

FP32, FP16, STRING, INT64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.STRING, TensorProto.INT64




def add_mul(repo: Path, name: str, config: str | None = None, batch="batch") -> None:
    """SUM = A + B, PROD = A * B over [batch, 4] FP32."""
    shape = [batch, 4] if batch is not None else [2, 4]
    save_graph(repo / name / "1" / "model.onnx",
               [helper.make_node("Add", ["A", "B"], ["SUM"]),
                helper.make_node("Mul", ["A", "B"], ["PROD"])],
               [("A", FP32, shape), ("B", FP32, shape)],
               [("SUM", FP32, shape), ("PROD", FP32, shape)])
    if config is not None:
        write(repo / name / "config.pbtxt", config)


BLS_CALLER = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name="auto", requested_output_names=["SUM", "PROD"],
                inputs=[pb_utils.Tensor("A", x), pb_utils.Tensor("B", x)])
            result = call.exec()
            if result.has_error():
                raise pb_utils.TritonModelException(result.error().message())
            s = pb_utils.get_output_tensor_by_name(result, "SUM").as_numpy()
            p = pb_utils.get_output_tensor_by_name(result, "PROD").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", s + p)]))
        return responses
'''


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("onnx_repo")
    add_mul(repo, "auto")  # no config.pbtxt at all
    add_mul(repo, "batched", """
        platform: "onnxruntime_onnx"
        max_batch_size: 8
        dynamic_batching { max_queue_delay_microseconds: 200000 }
        parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
        parameters { key: "inter_op_thread_count" value: { string_value: "1" } }
        optimization { graph { level: 1 } }
        """)
    add_mul(repo, "fixed", 'backend: "onnxruntime"', batch=None)  # no batch dimension
    save_graph(repo / "strings" / "1" / "model.onnx",
               [helper.make_node("Identity", ["TEXT"], ["SAME"]),
                helper.make_node("Shape", ["TEXT"], ["SHAPE"])],
               [("TEXT", STRING, ["b", 2])], [("SAME", STRING, ["b", 2]), ("SHAPE", INT64, [2])])
    write(repo / "strings" / "config.pbtxt", 'backend: "onnxruntime"')
    save_graph(repo / "half" / "1" / "net.onnx",
               [helper.make_node("Add", ["H", "H"], ["H2"])],
               [("H", FP16, [None, 3])], [("H2", FP16, [None, 3])])
    write(repo / "half" / "config.pbtxt", '''
        backend: "onnxruntime"
        default_model_filename: "net.onnx"
        max_batch_size: 2
        input [ { name: "H" data_type: TYPE_FP16 dims: [ 3 ] } ]
        output [ { name: "H2" data_type: TYPE_FP16 dims: [ 3 ] } ]
        ''')
    write(repo / "caller" / "1" / "model.py", BLS_CALLER)
    write(repo / "caller" / "config.pbtxt", '''
        backend: "python"
        input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
        ''')
    # two versions (Add, then Mul) served at once, warmed up with zeros
    for version, op in (("1", "Add"), ("2", "Mul")):
        save_graph(repo / "versions" / version / "model.onnx",
                   [helper.make_node(op, ["P", "Q"], ["R"])],
                   [("P", FP32, ["b", 2]), ("Q", FP32, ["b", 2])], [("R", FP32, ["b", 2])])
    write(repo / "versions" / "config.pbtxt", """
        backend: "onnxruntime"
        version_policy: { all { } }
        model_warmup [ { name: "zeros" batch_size: 2 count: 3
            inputs { key: "P" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } }
            inputs { key: "Q" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } } ]
        """)
    # configs that contradict their graphs: Triton's load errors
    add_mul(repo, "bad_dtype", """
        backend: "onnxruntime"
        max_batch_size: 4
        input [ { name: "A" data_type: TYPE_INT32 dims: [ 4 ] },
                { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
        """)
    add_mul(repo, "bad_dims", """
        backend: "onnxruntime"
        max_batch_size: 4
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 5 ] },
                { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
        """)
    add_mul(repo, "bad_name", """
        backend: "onnxruntime"
        max_batch_size: 4
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
                { name: "C" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
        """)
    add_mul(repo, "bad_batch", """
        backend: "onnxruntime"
        max_batch_size: 4
        """, batch=None)
    exported_names(repo)
    return repo


SCALE_STEP = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "scaled/out:0", pb_utils.get_input_tensor_by_name(r, "input.1").as_numpy() * 10)])
            for r in requests]
'''


def exported_names(repo: Path) -> None:
    """Tensor names as exporters write them (TF's "scope/op:0", PyTorch's "input.1" and
    "308"), in an ONNX graph and a Python step, through an ensemble that maps them (the
    shape of Triton's Conceptual_Guide Part_5 repository)."""
    save_graph(repo / "detector" / "1" / "model.onnx",
               [helper.make_node("Sigmoid", ["input_images:0"],
                                 ["feature_fusion/Conv_7/Sigmoid:0"]),
                helper.make_node("Neg", ["input_images:0"], ["308"])],
               [("input_images:0", FP32, ["b", 3])],
               [("feature_fusion/Conv_7/Sigmoid:0", FP32, ["b", 3]), ("308", FP32, ["b", 3])])
    write(repo / "detector" / "config.pbtxt", """
        platform: "onnxruntime_onnx"
        max_batch_size: 4
        input [ { name: "input_images:0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "feature_fusion/Conv_7/Sigmoid:0" data_type: TYPE_FP32 dims: [ 3 ] },
                 { name: "308" data_type: TYPE_FP32 dims: [ 3 ] } ]
        """)
    write(repo / "scaler" / "1" / "model.py", SCALE_STEP)
    write(repo / "scaler" / "config.pbtxt", """
        backend: "python"
        max_batch_size: 4
        input [ { name: "input.1" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "scaled/out:0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        """)
    write(repo / "exported" / "config.pbtxt", """
        platform: "ensemble"
        max_batch_size: 4
        input [ { name: "image:0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "score/map:0" data_type: TYPE_FP32 dims: [ 3 ] },
                 { name: "308" data_type: TYPE_FP32 dims: [ 3 ] } ]
        ensemble_scheduling { step [
          { model_name: "detector" model_version: -1
            input_map { key: "input_images:0" value: "image:0" }
            output_map { key: "feature_fusion/Conv_7/Sigmoid:0" value: "Sigmoid:0" }
            output_map { key: "308" value: "308" } },
          { model_name: "scaler" model_version: -1
            input_map { key: "input.1" value: "Sigmoid:0" }
            output_map { key: "scaled/out:0" value: "score/map:0" } } ] }
        """)
    (repo / "exported" / "1").mkdir()  # an ensemble, too, has a version folder


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    log = tmp_path_factory.mktemp("onnx_log") / "server.log"
    with running_server(repo, log_path=log, ready_path="/v2/health/live",
                        ready_timeout=60) as srv:
        yield srv


def test_a_model_with_no_config_is_auto_completed_from_its_graph(server) -> None:
    client = server.http_client()
    assert client.is_model_ready("auto")
    cfg = client.get_model_config("auto")
    assert cfg["backend"] == "onnxruntime" and cfg["platform"] == "onnxruntime_onnx"
    assert cfg["default_model_filename"] == "model.onnx"
    assert cfg["max_batch_size"] == 4 and "dynamic_batching" in cfg
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [
        ("A", "TYPE_FP32", [4]), ("B", "TYPE_FP32", [4])]
    assert sorted(o["name"] for o in cfg["output"]) == ["PROD", "SUM"]
    meta = client.get_model_metadata("auto")
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"][0]["shape"] == [-1, 4]
    check_add_mul(client, "auto")


def test_dynamic_batching_concatenates_requests_and_splits_outputs(server) -> None:
    check_batched(server, "batched")


def test_a_model_without_a_batch_dimension(server) -> None:
    client = server.http_client()
    cfg = client.get_model_config("fixed")
    assert cfg["max_batch_size"] == 0 and "dynamic_batching" not in cfg
    assert cfg["input"][0]["dims"] == [2, 4]
    a = np.ones((2, 4), np.float32)
    r = client.infer("fixed", [inp("A", a, "FP32"), inp("B", a, "FP32")])
    np.testing.assert_array_equal(r.as_numpy("SUM"), a * 2)


def test_bytes_tensors(server) -> None:
    client = server.http_client()
    cfg = client.get_model_config("strings")
    assert cfg["input"][0]["data_type"] == "TYPE_STRING"
    text = np.array([["héllo".encode(), b"x"], [b"", b"world"]], dtype=object)
    r = client.infer("strings", [inp("TEXT", text, "BYTES")])
    assert r.as_numpy("SAME").tolist() == text.tolist()
    assert r.as_numpy("SHAPE").tolist() == [2, 2]  # no batch dimension: SHAPE has none
    assert cfg["max_batch_size"] == 0


def test_fp16_and_a_named_model_file(server) -> None:
    client = server.http_client()
    h = np.array([[0.5, 1.5, -2]], np.float16)
    r = client.infer("half", [inp("H", h, "FP16")])
    out = r.as_numpy("H2")
    assert out.dtype == np.float16 and out.tolist() == (h * 2).tolist()


def test_a_python_model_calls_an_onnx_model_by_bls(server) -> None:
    client = server.http_client()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    r = client.infer("caller", [inp("X", x, "FP32")])
    np.testing.assert_array_equal(r.as_numpy("Y"), x + x + x * x)


def test_exported_tensor_names_through_an_ensemble_of_onnx_and_python(server) -> None:
    x = np.array([[0.0, 1.0, -2.0], [3.0, -4.0, 0.5]], np.float32)
    expected = {"score/map:0": 10 / (1 + np.exp(-x)), "308": -x}
    for module, client in ((http, server.http_client()),
                           (grpcclient, grpcclient.InferenceServerClient(server.grpc_url))):
        result = client.infer("exported", [inp("image:0", x, "FP32", module)],
                              outputs=[module.InferRequestedOutput(n) for n in expected])
        for name, want in expected.items():
            np.testing.assert_allclose(result.as_numpy(name), want, rtol=1e-5)
    meta = server.http_client().get_model_metadata("detector")
    assert [o["name"] for o in meta["outputs"]] == ["feature_fusion/Conv_7/Sigmoid:0", "308"]


def test_versions_warmup_and_metrics_as_for_python_models(server) -> None:
    client = server.http_client()
    p, q = np.array([[2, 3]], np.float32), np.array([[4, 5]], np.float32)
    for version, want in (("1", p + q), ("2", p * q)):
        r = client.infer("versions", [inp("P", p, "FP32"), inp("Q", q, "FP32")],
                         model_version=version)
        np.testing.assert_array_equal(r.as_numpy("R"), want)
    stats = client.get_inference_statistics("versions", "1")["model_stats"][0]
    assert stats["inference_count"] == 1  # the warmup's 3 batches of 2 are not counted
    import urllib.request
    text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
    assert 'nv_inference_count{model="versions",version="2"} 1' in text


def test_requests_of_the_wrong_shape_or_datatype_are_refused_with_tritons_words(server) -> None:
    client = server.http_client()
    a = np.ones((2, 3), np.float32)
    with pytest.raises(InferenceServerException, match=r"unexpected shape for input 'A' for "
                       r"model 'auto'. Expected \[-1,4\], got \[2,3\]"):
        client.infer("auto", [inp("A", a, "FP32"), inp("B", a, "FP32")])
    i = np.ones((1, 4), np.int32)
    with pytest.raises(InferenceServerException,
                       match="inference input 'A' data-type is 'INT32', but model 'auto' "
                             "expects 'FP32'"):
        client.infer("auto", [inp("A", i, "INT32"), inp("B", i.astype(np.float32), "FP32")])
    too_many = np.ones((5, 4), np.float32)
    with pytest.raises(InferenceServerException, match="inference request batch-size must be <= 4 for .auto."):
        client.infer("auto", [inp("A", too_many, "FP32"), inp("B", too_many, "FP32")])


@pytest.mark.parametrize("model, message", [
    ("bad_dtype", "unable to load model 'bad_dtype', configuration expects datatype TYPE_INT32 "
                  "for input 'A', model provides TYPE_FP32"),
    ("bad_dims", "model 'bad_dims', tensor 'A': the model expects 2 dimensions (shape [-1,4]) "
                 "but the model configuration specifies 2 dimensions (an initial batch "
                 "dimension because max_batch_size > 0 followed by the explicit tensor shape, "
                 "making complete shape [-1,5])"),
    ("bad_name", "unexpected inference input 'C', allowed inputs are: A, B"),
    ("bad_batch", "autofill failed for model 'bad_batch': model does not support batching "
                  "while non-zero max_batch_size is specified"),
])
def test_configs_that_contradict_the_graph_fail_to_load(server, model, message) -> None:
    client = server.http_client()
    assert not client.is_model_ready(model)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert message in index[model]["reason"], index[model]["reason"]


EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"
PIPELINE = ("text_features", "text_classifier", "text_labels", "text_pipeline",
            "text_ensemble")


def test_the_examples_text_pipeline(tmp_path) -> None:
    """models/examples: preprocess (Python) -> ONNX -> postprocess (Python) by BLS, and
    the same as an ensemble."""
    args = ["--model-control-mode", "explicit"]
    for name in PIPELINE:
        args += ["--load-model", name]
    with running_server(EXAMPLES, args=args, ready_timeout=60) as server:
        client = server.http_client()
        text = np.array([[b"hello there"], [b"12345 678"], [b"STOP THAT NOW"]], dtype=object)
        r = client.infer("text_pipeline", [inp("TEXT", text, "BYTES")])
        assert r.as_numpy("LABEL").reshape(-1).tolist() == [b"words", b"numbers", b"shouting"]
        assert (r.as_numpy("SCORE") > 0.5).all()
        # the same three steps as an ensemble (Python -> ONNX -> Python): the same answers
        e = client.infer("text_ensemble", [inp("TEXT", text, "BYTES")])
        assert e.as_numpy("LABEL").tolist() == r.as_numpy("LABEL").tolist()
        np.testing.assert_array_equal(e.as_numpy("SCORE"), r.as_numpy("SCORE"))
        cfg = client.get_model_config("text_classifier")
        assert cfg["max_batch_size"] == 8 and "dynamic_batching" in cfg
        assert [i["name"] for i in cfg["input"]] == ["FEATURES"]


def test_the_examples_onnx_file_is_what_its_script_makes(tmp_path, monkeypatch) -> None:
    import importlib.util

    script = EXAMPLES.parents[1] / "scripts" / "make_example_onnx.py"
    spec = importlib.util.spec_from_file_location("make_example_onnx", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "OUT", tmp_path)
    module.main()
    committed = EXAMPLES / "text_classifier" / "1" / "model.onnx"
    assert (tmp_path / "model.onnx").read_bytes() == committed.read_bytes()


def _env_without_onnxruntime(path: Path) -> Path:
    """A Python environment for EXECUTION_ENV_PATH holding only what a stub needs (numpy,
    posix_ipc): onnxruntime is genuinely not importable there."""
    import shutil
    import subprocess
    import sys
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = next((path / "lib").glob("python*/site-packages"))
    for entry in ours.iterdir():
        if entry.name.split(".")[0].split("-")[0] in ("numpy", "posix_ipc"):
            target = theirs / entry.name
            if entry.is_dir():
                shutil.copytree(entry, target, symlinks=True)
            else:
                shutil.copy2(entry, target)
    return path


def test_a_missing_onnxruntime_fails_only_that_model_naming_what_to_install(tmp_path) -> None:
    env = _env_without_onnxruntime(tmp_path / "env")
    repo = tmp_path / "repo"
    add_mul(repo, "no_runtime", f"""
        backend: "onnxruntime"
        parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{env}" }} }}
        """)
    add_mul(repo, "fine")
    with running_server(repo, ready_path="/v2/health/live", ready_timeout=60) as server:
        client = server.http_client()
        assert client.is_model_ready("fine") and not client.is_model_ready("no_runtime")
        reason = {m["name"]: m for m in client.get_model_repository_index()}[
            "no_runtime"]["reason"]
        assert ("the 'onnxruntime' backend needs the Python package 'onnxruntime', which "
                "cannot be imported (ModuleNotFoundError: No module named 'onnxruntime'): "
                "pip install 'pbserve[onnx]' (or pip install onnxruntime)") in reason, reason
