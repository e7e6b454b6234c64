"""The built-in OpenVINO backend (pbserve/model_backends/openvino): models built with
openvino's model API and saved as model.xml + model.bin, served by a real server, driven
by tritonclient over HTTP and gRPC."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

ov = pytest.importorskip("openvino")
import openvino.opset13 as ops  # noqa: E402

from add_mul_checks import check_add_mul, check_batched  # noqa: E402
from client_inputs import typed_input as inp  # noqa: E402
from model_files import write  # noqa: E402
from pbserve.testing import running_server  # noqa: E402


def save_add_mul(folder: Path, shape: list[int], layout: str | None = "NC",
                 dtype=np.float32) -> None:
    """SUM = A + B, PROD = A * B over `shape` (-1: a variable dimension) as
    `folder`/1/model.xml + model.bin; `layout` on every input and output."""
    a, b = (ops.parameter(shape, dtype, name=n) for n in ("A", "B"))
    total, product = ops.add(a, b), ops.multiply(a, b)
    total.output(0).get_tensor().set_names({"SUM"})
    product.output(0).get_tensor().set_names({"PROD"})
    model = ov.Model([total, product], [a, b], folder.name)
    if layout:
        for port in list(model.inputs) + list(model.outputs):
            ov.layout_helpers.set_layout(port, ov.Layout(layout))
    (folder / "1").mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(folder / "1" / "model.xml"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("openvino_repo")
    save_add_mul(repo / "auto", [-1, 4])  # no config.pbtxt at all
    # a partial config (outputs only, as Triton's L0_model_config partial_config) for a
    # model without layout: the inputs come from the model, batching from the config
    save_add_mul(repo / "batched", [-1, 4], layout=None)
    write(repo / "batched" / "config.pbtxt", """
        backend: "openvino"
        max_batch_size: 8
        output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] },
                 { name: "PROD" data_type: TYPE_FP32 dims: [ 4 ] } ]
        dynamic_batching { max_queue_delay_microseconds: 200000 }
        parameters { key: "NUM_STREAMS" value: { string_value: "1" } }
        parameters { key: "PERFORMANCE_HINT" value: { string_value: "LATENCY" } }
        parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "1" } }
        """)
    # every dimension variable, no layout: no batching, dims [-1,-1]
    save_add_mul(repo / "free", [-1, -1], layout=None)
    # the config's data types are the tensors' (OpenVINO converts from and to FP32)
    save_add_mul(repo / "converted", [-1, 4])
    write(repo / "converted" / "config.pbtxt", """
        max_batch_size: 2
        input [ { name: "A" data_type: TYPE_INT32 dims: [ 4 ] },
                { name: "B" data_type: TYPE_INT32 dims: [ 4 ] } ]
        output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 4 ] } ]
        """)
    # a fixed batch dimension of 8 (as gen_qa_models.py --openvino makes them)
    for name, padding in (("padded", "YES"), ("unpadded", "NO")):
        save_add_mul(repo / name, [8, 4], layout=None)
        write(repo / name / "config.pbtxt", f"""
            backend: "openvino"
            max_batch_size: 8
            input [ {{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }},
                    {{ name: "B" data_type: TYPE_FP32 dims: [ 4 ] }} ]
            output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }} ]
            parameters {{ key: "ENABLE_BATCH_PADDING" value: {{ string_value: "{padding}" }} }}
            """)
    # models that fail to load, with Triton's words
    write(repo / "bad_file" / "1" / "model.xml", "<net name='broken'><layers>")
    write(repo / "bad_file" / "config.pbtxt", 'backend: "openvino"')
    save_add_mul(repo / "bad_dims", [-1, 4])
    write(repo / "bad_dims" / "config.pbtxt", """
        backend: "openvino"
        max_batch_size: 4
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 5 ] },
                { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
        # read after the dims are checked, as Triton reads it: not the error
        parameters { key: "NUM_STREAMS" value: { string_value: "many" } }
        """)
    save_add_mul(repo / "bad_streams", [-1, 4])
    write(repo / "bad_streams" / "config.pbtxt", """
        backend: "openvino"
        parameters { key: "NUM_STREAMS" value: { string_value: "many" } }
        """)
    save_add_mul(repo / "bad_type", [-1, 4])
    write(repo / "bad_type" / "config.pbtxt", """
        backend: "openvino"
        max_batch_size: 4
        input [ { name: "A" data_type: TYPE_FP64 dims: [ 4 ] },
                { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
        """)
    return repo


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    log = tmp_path_factory.mktemp("openvino_log") / "server.log"
    with running_server(repo, log_path=log, ready_path="/v2/health/live",
                        ready_timeout=60) as srv:
        yield srv


def test_a_model_with_no_config_is_auto_completed_from_the_model(server) -> None:
    client = server.http_client()
    cfg = client.get_model_config("auto")
    assert cfg["backend"] == "openvino" and cfg["platform"] == ""
    assert cfg["default_model_filename"] == "model.xml"
    # every input and output has a batch dimension in its layout: Triton's default of 4
    assert cfg["max_batch_size"] == 4 and "dynamic_batching" in cfg
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [
        ("A", "TYPE_FP32", [4]), ("B", "TYPE_FP32", [4])]
    assert [o["name"] for o in cfg["output"]] == ["SUM", "PROD"]
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU"
    assert cfg["instance_group"][0]["count"] == 1  # Triton's default for openvino
    assert client.get_model_metadata("auto")["platform"] == "openvino"
    check_add_mul(client, "auto")


def test_a_partial_config_gets_its_inputs_and_batches_dynamically(server) -> None:
    cfg = server.http_client().get_model_config("batched")
    assert [(i["name"], i["dims"]) for i in cfg["input"]] == [("A", [4]), ("B", [4])]
    check_batched(server, "batched")


def test_the_configs_data_types_are_converted_by_openvino(server) -> None:
    client = server.http_client()
    a = np.array([[1, 2, 3, 4]], np.int32)
    r = client.infer("converted", [inp("A", a, "INT32"), inp("B", a * 10, "INT32")])
    out = r.as_numpy("SUM")
    assert out.dtype == np.int32 and out.tolist() == [[11, 22, 33, 44]]


def test_a_fixed_batch_dimension_is_padded_or_refused_with_tritons_words(server) -> None:
    client = server.http_client()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = client.infer("padded", [inp("A", a, "FP32"), inp("B", a, "FP32")])
    np.testing.assert_array_equal(r.as_numpy("SUM"), a + a)  # 3 rows back, not 8
    with pytest.raises(InferenceServerException,
                       match=r"expected requests with batch size '8', got '3'\.\.\. this error "
                             r"can be avoided by setting 'ENABLE_BATCH_PADDING' parameter"):
        client.infer("unpadded", [inp("A", a, "FP32"), inp("B", a, "FP32")])
    full = np.ones((8, 4), np.float32)
    r = client.infer("unpadded", [inp("A", full, "FP32"), inp("B", full, "FP32")])
    np.testing.assert_array_equal(r.as_numpy("SUM"), full * 2)


def test_inputs_of_a_wrong_shape_are_refused(server) -> None:
    client = server.http_client()
    bad = np.ones((2, 3), np.float32)
    with pytest.raises(InferenceServerException, match=r"unexpected shape for input 'A' for "
                       r"model 'auto'. Expected \[-1,4\], got \[2,3\]"):
        client.infer("auto", [inp("A", bad, "FP32"), inp("B", bad, "FP32")])
    # dims [-1,-1] let any shape through the server: OpenVINO refuses shapes that do not
    # broadcast, and that request alone fails
    cfg = client.get_model_config("free")
    assert cfg["max_batch_size"] == 0 and cfg["input"][0]["dims"] == [-1, -1]
    grpc = server.grpc_client()
    with pytest.raises(InferenceServerException, match="openvino error in running async "
                                                       "inference : "):
        grpc.infer("free", [inp("A", bad, "FP32", grpcclient),
                            inp("B", np.ones((2, 4), np.float32), "FP32", grpcclient)])
    ok = np.ones((3, 5), np.float32)
    r = grpc.infer("free", [inp("A", ok, "FP32", grpcclient), inp("B", ok, "FP32", grpcclient)])
    np.testing.assert_array_equal(r.as_numpy("SUM"), ok * 2)


@pytest.mark.parametrize("model, message", [
    ("bad_file", "openvino error in reading model : Unable to read the model: "),
    ("bad_dims", "model 'bad_dims', tensor 'A': the model expects 2 dimensions (shape [-1,4]) "
                 "but the model configuration specifies 2 dimensions (an initial batch "
                 "dimension because max_batch_size > 0 followed by the explicit tensor shape, "
                 "making complete shape [4,5])"),
    ("bad_streams", "expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, "
                    "got many"),
    ("bad_type", "unsupported datatype TYPE_FP64 for input 'A' for model 'bad_type'"),
])
def test_bad_models_and_configs_fail_to_load_with_tritons_words(server, model, message) -> None:
    client = server.http_client()
    assert not client.is_model_ready(model)
    assert client.is_model_ready("auto")  # the others load
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert message in index[model]["reason"], index[model]["reason"]


def test_an_openvino_model_without_instance_group_runs_on_the_cpu_where_there_are_gpus(
        ) -> None:
    """Triton's openvino backend prefers KIND_CPU: its default group is a CPU group even
    on a machine with GPUs (a Python model's would be KIND_GPU there)."""
    from tritonclient.grpc import model_config_pb2 as mc

    from pbserve.core.config.config_checks import normalize_instance_groups

    kinds = {}
    for backend in ("openvino", "python"):
        cfg = mc.ModelConfig(name="m", backend=backend)
        normalize_instance_groups(cfg, [0])
        kinds[backend] = mc.ModelInstanceGroup.Kind.Name(cfg.instance_group[0].kind)
    assert kinds == {"openvino": "KIND_CPU", "python": "KIND_GPU"}
