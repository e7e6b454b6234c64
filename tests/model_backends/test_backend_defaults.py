"""What Triton fills in and refuses per backend, through a real server and tritonclient:
the default instance count (Triton core's SetDefaultInstanceCount: 2 for a KIND_CPU group
of an onnxruntime model, 1 for pytorch and python), with and without a config.pbtxt, and
the data types Triton's pytorch and onnxruntime backends refuse at load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as http
from tritonclient.utils import InferenceServerException

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
from onnx import TensorProto, helper  # noqa: E402

from pbserve.core.config.model_config import complete_defaults, parse_model_config  # noqa: E402
from pbserve.testing import running_server, stub_pids  # noqa: E402
from model_files import write  # noqa: E402

PYTHON_MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
'''


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2



def add_graph(repo: Path, name: str, config: str | None = None) -> None:
    """SUM = A + B over [batch, 4] FP32; a config.pbtxt only when `config` is given."""
    shape = ["batch", 4]
    graph = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["SUM"])], name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("A", "B")],
        [helper.make_tensor_value_info("SUM", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (repo / name / "1").mkdir(parents=True)
    onnx.save(model, str(repo / name / "1" / "model.onnx"))
    if config is not None:
        write(repo / name / "config.pbtxt", config)


def torch_model(repo: Path, name: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    torch.jit.script(Double()).save(str(repo / name / "1" / "model.pt"))
    write(repo / name / "config.pbtxt", config)


def io(kind: str, name: str, dtype: str, dims: str) -> str:
    return f'{kind} {{ name: "{name}" data_type: {dtype} dims: [ {dims} ] }}'


# model -> (instance groups as a client reads them back: name, kind, count)
GROUPS = {
    "onnx_auto": [("onnx_auto", "KIND_CPU", 2)],  # no config.pbtxt at all
    "onnx_nogroup": [("onnx_nogroup", "KIND_CPU", 2)],  # a config without instance_group
    "onnx_kind": [("onnx_kind_0", "KIND_CPU", 2), ("onnx_kind_1", "KIND_CPU", 2)],
    "onnx_one": [("onnx_one_0", "KIND_CPU", 1)],  # a count given stays
    "torch_default": [("torch_default", "KIND_CPU", 1)],
    "python_default": [("python_default", "KIND_CPU", 1)],
}

# model -> Triton's words for its load failure
REFUSED = {
    "torch_u32_in": "unsupported datatype TYPE_UINT32 for input 'INPUT0' for model "
                    "'torch_u32_in'",
    "torch_u64_out": "unsupported datatype TYPE_UINT64 for output 'OUTPUT0' for model "
                     "'torch_u64_out'",
    "torch_u16_in": "unsupported datatype TYPE_UINT16 for input 'INPUT0' for model "
                    "'torch_u16_in'",
    "torch_bf16_out": "unsupported datatype TYPE_BF16 for output 'OUTPUT0' for model "
                      "'torch_bf16_out'",
    "torch_words_2d": "Triton only supports 1 dimensional List of String as input for "
                      "'W' for model 'torch_words_2d'",
    "onnx_bf16": "unsupported datatype TYPE_BF16 for input 'A' for model 'onnx_bf16'",
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("defaults_repo")
    add_graph(repo, "onnx_auto")
    add_graph(repo, "onnx_nogroup", 'backend: "onnxruntime"\nmax_batch_size: 4')
    add_graph(repo, "onnx_kind", """
        platform: "onnxruntime_onnx"
        instance_group [ { kind: KIND_CPU }, { kind: KIND_AUTO count: 0 } ]
        """)
    add_graph(repo, "onnx_one", """
        backend: "onnxruntime"
        instance_group [ { kind: KIND_CPU count: 1 } ]
        """)
    add_graph(repo, "onnx_bf16", f"""
        backend: "onnxruntime"
        max_batch_size: 4
        {io("input", "A", "TYPE_BF16", "4")}
        {io("input", "B", "TYPE_FP32", "4")}
        {io("output", "SUM", "TYPE_FP32", "4")}
        """)
    fp32 = io("input", "INPUT0", "TYPE_FP32", "2"), io("output", "OUTPUT0", "TYPE_FP32", "2")
    torch_model(repo, "torch_default", 'platform: "pytorch_libtorch"\n' + "\n".join(fp32))
    for name, dtype in (("torch_u32_in", "TYPE_UINT32"), ("torch_u16_in", "TYPE_UINT16")):
        torch_model(repo, name, f"""
            backend: "pytorch"
            {io("input", "INPUT0", dtype, "2")}
            {fp32[1]}
            """)
    for name, dtype in (("torch_u64_out", "TYPE_UINT64"), ("torch_bf16_out", "TYPE_BF16")):
        torch_model(repo, name, f"""
            backend: "pytorch"
            {fp32[0]}
            {io("output", "OUTPUT0", dtype, "2")}
            """)
    torch_model(repo, "torch_words_2d", f"""
        backend: "pytorch"
        max_batch_size: 2
        {io("input", "W", "TYPE_STRING", "-1")}
        {io("output", "U", "TYPE_STRING", "-1")}
        """)
    write(repo / "python_default" / "1" / "model.py", PYTHON_MODEL)
    write(repo / "python_default" / "config.pbtxt", f"""
        backend: "python"
        {io("input", "X", "TYPE_FP32", "2")}
        {io("output", "Y", "TYPE_FP32", "2")}
        """)
    return repo


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    log = tmp_path_factory.mktemp("defaults_log") / "server.log"
    with running_server(repo, args=["--model-control-mode", "explicit", "--load-model", "*"],
                        log_path=log, ready_path="/v2/health/live", ready_timeout=120) as srv:
        yield srv


def stub_count(server, model: str) -> int:
    """How many of the server's stubs serve `model` (their instance names are
    "<group>_<index>", the groups "<model>" or "<model>_<index>")."""
    count = 0
    for pid in stub_pids(server.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        name = args[args.index(b"--name") + 1].decode() if b"--name" in args else ""
        if name.startswith(model + "_"):
            count += 1
    return count


def test_instance_counts_a_client_reads_back_and_the_stubs_that_run(server) -> None:
    client = server.http_client()
    grpc = server.grpc_client()
    for model, groups in GROUPS.items():
        assert client.is_model_ready(model), model
        cfg = client.get_model_config(model)
        assert [(g["name"], g["kind"], g["count"]) for g in cfg["instance_group"]] == groups
        proto = grpc.get_model_config(model).config
        assert [(g.name, g.count) for g in proto.instance_group] == \
            [(name, count) for name, _, count in groups]
        assert stub_count(server, model) == sum(count for _, _, count in groups), model
    assert client.get_model_config("onnx_auto")["backend"] == "onnxruntime"


def test_the_onnx_instances_serve(server) -> None:
    client = server.grpc_client()
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    for model in ("onnx_auto", "onnx_nogroup", "onnx_kind"):
        inputs = []
        for name in ("A", "B"):
            tensor = grpcclient.InferInput(name, [2, 4], "FP32")
            tensor.set_data_from_numpy(a)
            inputs.append(tensor)
        result = client.infer(model, inputs)
        np.testing.assert_array_equal(result.as_numpy("SUM"), a + a)


@pytest.mark.parametrize("model", sorted(REFUSED))
def test_data_types_the_backend_cannot_take_fail_the_load(server, model) -> None:
    client = server.http_client()
    assert not client.is_model_ready(model)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index[model]["state"] == "UNAVAILABLE"
    assert REFUSED[model] in index[model]["reason"], index[model]["reason"]
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(model)
    assert REFUSED[model] in str(caught.value)


def test_a_refused_input_type_no_longer_fails_each_request_instead(server) -> None:
    """Before, the TYPE_UINT32 model loaded and each request answered 500 with a
    TorchScript traceback; now the request finds no ready model."""
    client = server.http_client()
    x = http.InferInput("INPUT0", [2], "UINT32")
    x.set_data_from_numpy(np.array([1, 2], np.uint32))
    with pytest.raises(InferenceServerException) as caught:
        client.infer("torch_u32_in", [x])
    assert "Traceback" not in str(caught.value)
    assert "torch_u32_in" in str(caught.value)


@pytest.mark.parametrize("backend, kind, gpus, count", [
    ("onnxruntime", "KIND_CPU", [], 2),
    ("onnxruntime", "KIND_AUTO", [], 2),
    ("onnxruntime", "KIND_GPU", [0], 1),
    ("onnxruntime", "KIND_AUTO", [0], 1),  # resolves to KIND_GPU
    ("onnxruntime", "KIND_MODEL", [], 1),
    ("tensorflow", "KIND_CPU", [], 2),  # a Python-based backend of that name too
    ("pytorch", "KIND_CPU", [], 1),
    ("pytorch", "KIND_GPU", [0], 1),
    ("python", "KIND_CPU", [], 1),
    ("python", "KIND_GPU", [0], 1),
])
def test_set_default_instance_count(tmp_path, backend, kind, gpus, count) -> None:
    """SetDefaultInstanceCount by the config's backend and the group's resolved kind,
    without a server (KIND_GPU needs GPUs: `gpus` stands for them)."""
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(PYTHON_MODEL)
    text = f'backend: "{backend}"\ninstance_group [ {{ kind: {kind} }} ]'
    cfg = complete_defaults(parse_model_config(text), "m", model, gpus=gpus, check_io=False)
    assert [g.count for g in cfg.instance_group] == [count]
    cfg = complete_defaults(parse_model_config(f'backend: "{backend}"'), "m", model,
                            gpus=gpus, check_io=False)
    default_count = 2 if backend in ("onnxruntime", "tensorflow") and not gpus else 1
    assert [g.count for g in cfg.instance_group] == [default_count]
