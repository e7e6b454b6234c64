"""Ragged batching in the built-in ONNX Runtime and PyTorch backends
(pbserve/model_backends/ragged.py): requests whose ragged input differs in shape run as
one batch, the input as one 1-D tensor, the config's batch inputs made beside it, a batch
output cut back by each request's input shape. Triton's ragged_batching.md example, as a
user would serve it: a real server, tritonclient, two requests at once."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as http

from pbserve.model_backends.ragged import (
    BatchInput, batch_input_value, batch_inputs, scatter_with_input_shape)
from pbserve.testing import running_server
from client_inputs import typed_input as inp
from model_files import write

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")


def _value(kind: str, shapes, data_type: str = "TYPE_INT32") -> list:
    return batch_input_value(BatchInput(kind, ("T",), data_type, "IN"), shapes).tolist()


def test_each_batch_input_kind_as_tritons_model_config_describes_it():
    shapes = [(1, 3), (1, 5), (2, 2)]
    assert _value("BATCH_ELEMENT_COUNT", shapes) == [3, 5, 4]
    assert _value("BATCH_ACCUMULATED_ELEMENT_COUNT", shapes) == [3, 8, 12]
    assert _value("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", shapes) == [0, 3, 8, 12]
    assert _value("BATCH_ACCUMULATED_ELEMENT_COUNT", shapes, "TYPE_FP32") == [3.0, 8.0, 12.0]
    # its shape is what it says: [the largest element count]
    assert np.shape(_value("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", shapes)) == (5,)
    # model_config.proto's example: a batch-2 input of [3, 1] and a batch-1 one of [2, 2]
    items = [(2, 3, 1), (1, 2, 2)]
    assert _value("BATCH_ITEM_SHAPE", items) == [[3, 1], [3, 1], [2, 2]]
    assert _value("BATCH_ITEM_SHAPE_FLATTEN", items) == [3, 1, 3, 1, 2, 2]


def test_a_batch_output_is_cut_by_each_requests_input_shape():
    pieces = scatter_with_input_shape(np.arange(8), (-1, -1), [(1, 3), (1, 5)])
    assert [p.tolist() for p in pieces] == [[[0, 1, 2]], [[3, 4, 5, 6, 7]]]
    with pytest.raises(ValueError, match="too small"):
        scatter_with_input_shape(np.arange(7), (-1, -1), [(1, 3), (1, 5)])


@pytest.mark.parametrize("entry, message", [
    ({"kind": "BATCH_ELEMENT_COUNT", "target_name": ["T"], "data_type": "TYPE_INT64",
      "source_input": ["IN"]}, "data type TYPE_INT64 is not supported"),
    ({"kind": "BATCH_ELEMENT_COUNT", "target_name": ["T"], "data_type": "TYPE_INT32",
      "source_input": ["NOPE"]}, "expects 1 source input that is an input of the model"),
    ({"kind": "BATCH_SOMETHING", "target_name": ["T"], "data_type": "TYPE_INT32",
      "source_input": ["IN"]}, "unknown batch input kind 'BATCH_SOMETHING'"),
])
def test_a_batch_input_triton_would_refuse_fails_the_load(entry, message):
    with pytest.raises(ValueError, match=message):
        batch_inputs({"input": [{"name": "IN"}], "batch_input": [entry]})


RAGGED_CONFIG = """
max_batch_size: 8
input [ { name: "%(input)s" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "%(index)s"
                data_type: TYPE_INT32 source_input: "%(input)s" } ]
output [ { name: "%(doubled)s" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "%(ends)s" data_type: TYPE_INT32 dims: [ 1 ] } ]
batch_output [ { target_name: "%(doubled)s" kind: BATCH_SCATTER_WITH_INPUT_SHAPE
                 source_input: "%(input)s" } ]
dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 30000000 }
"""
ONNX_NAMES = {"input": "INPUT0", "index": "INDEX", "doubled": "OUTPUT0", "ends": "ENDS"}
TORCH_NAMES = {"input": "INPUT__0", "index": "INDEX__1", "doubled": "OUTPUT__0",
               "ends": "ENDS__1"}


def _onnx_model(repo: Path, name: str, input_shape: list) -> None:
    """OUTPUT0 = 2 * INPUT0 over the batch's one 1-D tensor; ENDS = INDEX as [-1, 1]
    (where each request ends in it: BATCH_ACCUMULATED_ELEMENT_COUNT)."""
    from onnx import TensorProto, helper

    from model_files import save_graph

    save_graph(repo / name / "1" / "model.onnx",
               [helper.make_node("Add", ["INPUT0", "INPUT0"], ["OUTPUT0"]),
                helper.make_node("Reshape", ["INDEX", "column"], ["ENDS"])],
               [("INPUT0", TensorProto.FLOAT, input_shape), ("INDEX", TensorProto.INT32, ["r"])],
               [("OUTPUT0", TensorProto.FLOAT, ["n"]), ("ENDS", TensorProto.INT32, ["r", 1])],
               [helper.make_tensor("column", TensorProto.INT64, [2], [-1, 1])])
    write(repo / name / "config.pbtxt",
          'platform: "onnxruntime_onnx"\n' + RAGGED_CONFIG % ONNX_NAMES)


class Ragged(torch.nn.Module):
    def forward(self, INPUT__0: torch.Tensor, INDEX__1: torch.Tensor):  # noqa: N803
        return INPUT__0 * 2, INDEX__1.reshape(-1, 1)


def _torch_model(repo: Path, name: str) -> None:
    path = repo / name / "1" / "model.pt"
    path.parent.mkdir(parents=True)
    torch.jit.script(Ragged()).save(str(path))
    write(repo / name / "config.pbtxt", 'backend: "pytorch"\n' + RAGGED_CONFIG % TORCH_NAMES)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    repo = tmp_path_factory.mktemp("ragged_repo")
    _onnx_model(repo, "ragged_onnx", ["n"])
    _onnx_model(repo, "ragged_not_1d", ["b", "n"])  # a ragged input must be [-1]
    _torch_model(repo, "ragged_torch")
    log = tmp_path_factory.mktemp("ragged_log") / "server.log"
    with running_server(repo, log_path=log, ready_path="/v2/health/live",
                        ready_timeout=60) as srv:
        yield srv


@pytest.mark.parametrize("model, names", [("ragged_onnx", ONNX_NAMES),
                                          ("ragged_torch", TORCH_NAMES)])
def test_requests_of_different_shapes_run_as_one_batch_and_get_their_own_pieces(
        server, model, names):
    client = server.http_client()
    assert client.is_model_ready(model)
    sent = [np.arange(3, dtype=np.float32)[None], np.arange(10, 15, dtype=np.float32)[None]]
    results: list = [None, None]

    def infer(i: int) -> None:  # each alone would wait out the 30 s queue delay
        with http.InferenceServerClient(server.http_url, network_timeout=60) as own:
            results[i] = own.infer(model, [inp(names["input"], sent[i], "FP32")])

    threads = [threading.Thread(target=infer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(r is not None for r in results)
    for array, result in zip(sent, results):
        np.testing.assert_array_equal(result.as_numpy(names["doubled"]), array * 2)
    # each request's end in the batch's 1-D input: the two ran together, in the order
    # they came (3 then 5 elements, or 5 then 3)
    ends = sorted(int(r.as_numpy(names["ends"]).reshape(-1)[0]) for r in results)
    assert ends in ([3, 8], [5, 8])
    stats = client.get_inference_statistics(model)["model_stats"][0]
    assert [(b["batch_size"], b["compute_infer"]["count"])
            for b in stats["batch_stats"]] == [(2, 1)]


def test_a_ragged_input_the_graph_does_not_take_as_one_dimension_fails_the_load(server):
    client = server.http_client()
    assert not client.is_model_ready("ragged_not_1d")
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert ("configuration expects model provides input with shape [-1]  for ragged "
            "input 'INPUT0', model provides [-1,-1]") in index["ragged_not_1d"]["reason"]
