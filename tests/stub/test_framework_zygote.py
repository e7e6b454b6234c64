"""The stubs of a built-in backend's models (TorchScript, ONNX) are forked by a zygote that
imported the backend's framework (stub/zygote.py --preload), so that they share its pages
instead of importing it each; a Python model's stubs keep the plain zygote."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from model_files import save_graph, write
from pbserve.testing import parent_of, running_server, stub_pids

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")

CONFIG = """
name: "{name}"
backend: "{backend}"
max_batch_size: 0
input [ {{ name: "{inp}" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "{out}" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
PYTHON_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)])
            for r in requests]
"""


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


def _repo(root: Path) -> Path:
    repo = root / "repo"
    for name in ("torch_a", "torch_b"):
        (repo / name / "1").mkdir(parents=True)
        torch.jit.script(Double()).save(str(repo / name / "1" / "model.pt"))
        write(repo / name / "config.pbtxt", CONFIG.format(
            name=name, backend="pytorch", inp="INPUT__0", out="OUTPUT__0"))
    from onnx import TensorProto, helper
    save_graph(repo / "onnx_a" / "1" / "model.onnx",
               [helper.make_node("Add", ["INPUT0", "INPUT0"], ["OUTPUT0"])],
               [("INPUT0", TensorProto.FLOAT, [4])], [("OUTPUT0", TensorProto.FLOAT, [4])])
    write(repo / "onnx_a" / "config.pbtxt", CONFIG.format(
        name="onnx_a", backend="onnxruntime", inp="INPUT0", out="OUTPUT0"))
    write(repo / "python_a" / "1" / "model.py", PYTHON_MODEL)
    write(repo / "python_a" / "config.pbtxt", CONFIG.format(
        name="python_a", backend="python", inp="INPUT0", out="OUTPUT0"))
    return repo


def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def _memory_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0])
    return fields


def _preloaded(zygote: int) -> list[str]:
    argv = _argv(zygote)
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == "--preload"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_server(_repo(tmp_path_factory.mktemp("framework_zygote")),
                        ready_timeout=120) as srv:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
        yield srv, client
        client.close()


def _stubs_by_model(server_pid: int) -> dict[str, int]:
    found = {}
    for pid in stub_pids(server_pid):
        argv = _argv(pid)
        name = argv[argv.index("--name") + 1]  # the instance's: <model>_0_0
        found[name.rsplit("_", 2)[0]] = pid
    return found


def test_each_backends_stubs_come_from_a_zygote_that_imported_its_framework(server) -> None:
    srv, _ = server
    stubs = _stubs_by_model(srv.pid)
    assert set(stubs) == {"torch_a", "torch_b", "onnx_a", "python_a"}
    zygote = {model: parent_of(pid) for model, pid in stubs.items()}
    assert zygote["torch_a"] == zygote["torch_b"]
    assert len({zygote["torch_a"], zygote["onnx_a"], zygote["python_a"]}) == 3
    assert _preloaded(zygote["torch_a"]) == ["torch"]
    assert _preloaded(zygote["onnx_a"]) == ["onnxruntime"]
    assert _preloaded(zygote["python_a"]) == []
    for pid in zygote.values():
        assert parent_of(pid) == srv.pid


def test_the_stubs_answer_as_plainly_started_ones(server) -> None:
    _, client = server
    data = np.arange(4, dtype=np.float32)
    for model, inp, out in (("torch_a", "INPUT__0", "OUTPUT__0"),
                            ("torch_b", "INPUT__0", "OUTPUT__0"),
                            ("onnx_a", "INPUT0", "OUTPUT0"), ("python_a", "INPUT0", "OUTPUT0")):
        tensor = httpclient.InferInput(inp, [4], "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer(model, [tensor])
        np.testing.assert_array_equal(result.as_numpy(out), data * 2)


def test_torch_stubs_share_the_frameworks_pages(server) -> None:
    """Most of a TorchScript stub's memory is torch's, imported in the zygote: the pages
    it shares outweigh those of its own (a plainly started stub's torch heap is its own:
    about 100 MiB of private pages against a few MiB here)."""
    srv, _ = server
    stubs = _stubs_by_model(srv.pid)
    for model in ("torch_a", "torch_b"):
        memory = _memory_kib(stubs[model])
        private = memory["Private_Clean"] + memory["Private_Dirty"]
        shared = memory["Shared_Clean"] + memory["Shared_Dirty"]
        assert shared > 4 * private, (model, memory)
        assert memory["Pss"] < memory["Rss"] / 2, (model, memory)


def test_a_framework_the_environment_lacks_leaves_the_stub_to_say_so(tmp_path, monkeypatch
                                                                     ) -> None:
    """A zygote that cannot import its framework forks stubs all the same; the stub's
    own import fails, in the backend's words, as a plainly started one's."""
    repo = tmp_path / "repo"
    (repo / "torch_a" / "1").mkdir(parents=True)
    torch.jit.script(Double()).save(str(repo / "torch_a" / "1" / "model.pt"))
    write(repo / "torch_a" / "config.pbtxt", CONFIG.format(
        name="torch_a", backend="pytorch", inp="INPUT__0", out="OUTPUT__0"))
    hide = tmp_path / "hide"  # a `torch` that cannot be imported, first on the path
    write(hide / "torch" / "__init__.py", 'raise ImportError("No module named \'torch\'")\n')
    monkeypatch.setenv("PYTHONPATH", str(hide))
    with running_server(repo, ready_path="/v2/health/live") as srv:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
        index = client.get_model_repository_index()
        client.close()
    (entry,) = [m for m in index if m["name"] == "torch_a"]
    assert entry["state"] == "UNAVAILABLE"
    assert "pbserve[torch]" in entry["reason"], entry


def test_a_forked_onnx_stub_ends_cleanly(tmp_path) -> None:
    """onnxruntime leaves a thread in its zygote that no fork copies: a stub ending as the
    interpreter does would run the framework's C++ destructors, which join it and abort
    (`terminate called after throwing an instance of 'std::system_error'`)."""
    from onnx import TensorProto, helper
    repo = tmp_path / "repo"
    save_graph(repo / "onnx_a" / "1" / "model.onnx",
               [helper.make_node("Add", ["INPUT0", "INPUT0"], ["OUTPUT0"])],
               [("INPUT0", TensorProto.FLOAT, [4])], [("OUTPUT0", TensorProto.FLOAT, [4])])
    write(repo / "onnx_a" / "config.pbtxt", CONFIG.format(
        name="onnx_a", backend="onnxruntime", inp="INPUT0", out="OUTPUT0"))
    log = tmp_path / "server.log"
    with running_server(repo, log_path=log) as srv:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{srv.http_port}")
        tensor = httpclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.ones(4, np.float32))
        np.testing.assert_array_equal(client.infer("onnx_a", [tensor]).as_numpy("OUTPUT0"),
                                      np.full(4, 2, np.float32))
        client.close()
        (stub,) = stub_pids(srv.pid)
        assert _preloaded(parent_of(stub)) == ["onnxruntime"]
    text = log.read_text()
    assert "successfully unloaded 'onnx_a'" in text
    assert "terminate called" not in text and "system_error" not in text, text[-2000:]
