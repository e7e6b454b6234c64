"""Triton's classification extension (pbserve/server/classification.py): outputs asked for
with `class_count=k` through the real tritonclient (HTTP and gRPC), from real servers
serving Python, ONNX, TorchScript and ensemble models built here.

Every expected string below, and every error message of Triton's, is what the real
tritonserver 2.51 (Python backend) answered for the same model, input and request, over
both protocols: same datatype, shape and bytes. Where 2.51 has no answer (its server
dies on a BYTES output asked for as a classification, and on an output of no elements)
the expectations are the later Triton's error and the shape Triton's code computes.
"""

from __future__ import annotations

import json
import queue
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc.service_pb2_grpc import GRPCInferenceServiceStub
from tritonclient.utils import InferenceServerException

from pbserve.server.classification import _std_sort, _top_indices
from pbserve.testing import running_server

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")

# A Python model giving each output of its config the input cast to the output's type.
CAST_MODEL = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.outputs = [(o["name"], pb_utils.triton_string_to_numpy(o["data_type"]))
                        for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            tensors = []
            for name, dtype in self.outputs:
                if dtype == np.object_:
                    value = np.array([str(v).encode() for v in x.ravel()],
                                     dtype=np.object_).reshape(x.shape)
                else:
                    value = x.astype(dtype)
                tensors.append(pb_utils.Tensor(name, value))
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
'''

# Decoupled: two responses a request, the input and its negation.
TWO_RESPONSES = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", -x)]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
           "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
           "seventeen", "eighteen", "nineteen"]
# a label with ":", an empty line (no label), a "\r" kept, UTF-8, spaces kept, no final
# newline, and fewer labels than elements
ODD_LABELS = "a:b\n\ncr\r\nünï\n  sp  \nlast-no-newline".encode()
OUTPUTS = [("OUT", "TYPE_FP32", "labels.txt"), ("PLAIN", "TYPE_FP32", None),
           ("I32", "TYPE_INT32", "labels.txt"), ("I16", "TYPE_INT16", None),
           ("F64", "TYPE_FP64", None), ("HALF", "TYPE_FP16", None),
           ("FLAG", "TYPE_BOOL", None), ("TEXT", "TYPE_STRING", None),
           ("ODD", "TYPE_FP32", "odd_labels.txt"), ("MISSING", "TYPE_FP32", "nope.txt"),
           ("ESCAPES", "TYPE_FP32", "../labels.txt")]

X1 = np.array([0.5, 2.0, -1.0, 2.0, 7.25, 0.0, 3.0], np.float32)
XB = np.array([[0.5, 2.0, -1.0, 2.0], [9.0, 1e20, -0.0, 3.3]], np.float32)


def write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text))


def cast_model(repo: Path, name: str, max_batch_size: int) -> None:
    outputs = ",\n".join(
        f'  {{ name: "{n}" data_type: {t} dims: [ -1 ]'
        + (f' label_filename: "{label}"' if label else "") + " }"
        for n, t, label in OUTPUTS)
    write(repo / name / "1" / "model.py", CAST_MODEL)
    write(repo / name / "config.pbtxt", f'''
        backend: "python"
        max_batch_size: {max_batch_size}
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        output [
        {outputs}
        ]
        instance_group [ {{ kind: KIND_CPU count: 1 }} ]
        ''')
    write(repo / name / "labels.txt", "".join(f"{n}\n" for n in NUMBERS))
    write(repo / name / "odd_labels.txt", ODD_LABELS)


def onnx_model(repo: Path) -> None:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    shape = ["batch", 5]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["PROB"]), helper.make_node("Neg", ["X"], ["NEG"])],
        "onnx_cls", [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("PROB", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("NEG", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (repo / "onnx_cls" / "1").mkdir(parents=True)
    onnx.save(model, str(repo / "onnx_cls" / "1" / "model.onnx"))
    write(repo / "onnx_cls" / "config.pbtxt", '''
        backend: "onnxruntime"
        max_batch_size: 4
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 5 ] } ]
        output [ { name: "PROB" data_type: TYPE_FP32 dims: [ 5 ] label_filename: "animals.txt" },
                 { name: "NEG" data_type: TYPE_FP32 dims: [ 5 ] } ]
        parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
        parameters { key: "inter_op_thread_count" value: { string_value: "1" } }
        ''')
    write(repo / "onnx_cls" / "animals.txt", "cat\ndog\nbird\nfish\nhorse\n")


def torch_model(repo: Path) -> bool:
    try:
        import torch
    except ImportError:
        return False

    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    (repo / "torch_cls" / "1").mkdir(parents=True)
    torch.jit.script(Double()).save(str(repo / "torch_cls" / "1" / "model.pt"))
    write(repo / "torch_cls" / "config.pbtxt", '''
        backend: "pytorch"
        max_batch_size: 4
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ]
                   label_filename: "colors.txt" } ]
        ''')
    write(repo / "torch_cls" / "colors.txt", "red\ngreen\nblue\n")
    return True


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("classification_repo")
    cast_model(repo, "cast", 0)
    cast_model(repo, "cast_b", 8)
    write(repo / "ens" / "1" / ".keep", "")
    write(repo / "ens" / "ens_labels.txt", "E0\nE1\nE2\nE3\nE4\n")
    write(repo / "ens" / "config.pbtxt", '''
        platform: "ensemble"
        max_batch_size: 8
        input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] },
                 { name: "Y_OWN" data_type: TYPE_FP32 dims: [ -1 ]
                   label_filename: "ens_labels.txt" },
                 { name: "Y_NL" data_type: TYPE_FP32 dims: [ -1 ] } ]
        ensemble_scheduling { step [
          { model_name: "cast_b" model_version: -1 input_map { key: "IN" value: "X" }
            output_map { key: "OUT" value: "Y" } output_map { key: "PLAIN" value: "Y_NL" } },
          { model_name: "cast_b" model_version: -1 input_map { key: "IN" value: "X" }
            output_map { key: "OUT" value: "Y_OWN" } } ] }
        ''')
    write(repo / "two" / "1" / "model.py", TWO_RESPONSES)
    write(repo / "two" / "config.pbtxt", '''
        backend: "python"
        model_transaction_policy { decoupled: true }
        input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] label_filename: "l.txt" } ]
        ''')
    write(repo / "two" / "l.txt", "L0\nL1\nL2\n")
    onnx_model(repo)
    with_torch = torch_model(repo)
    log = tmp_path_factory.mktemp("classification_log") / "server.log"
    with running_server(repo, log_path=log, ready_timeout=120) as srv:
        srv.with_torch = with_torch
        yield srv


def strings(array: np.ndarray) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else v for v in array.ravel().tolist()]


def http_classify(server, model: str, x: np.ndarray, output: str, k: int,
                  binary: bool = True, input_name: str = "IN") -> np.ndarray:
    client = server.http_client()
    inp = httpclient.InferInput(input_name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(model, [inp], outputs=[httpclient.InferRequestedOutput(
        output, binary_data=binary, class_count=k)])
    meta = result.get_output(output)
    assert meta["datatype"] == "BYTES"
    array = result.as_numpy(output)
    assert list(array.shape) == meta["shape"]
    return array


def grpc_classify(server, model: str, x: np.ndarray, output: str, k: int,
                  input_name: str = "IN") -> np.ndarray:
    client = server.grpc_client()
    inp = grpcclient.InferInput(input_name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(model, [inp], outputs=[
        grpcclient.InferRequestedOutput(output, class_count=k)])
    assert result.get_output(output).datatype == "BYTES"
    return result.as_numpy(output)


def both(server, model: str, x: np.ndarray, output: str, k: int,
         input_name: str = "IN") -> tuple[list[int], list[str]]:
    """The shape and strings of the classification, the same over HTTP (binary and JSON
    outputs) and gRPC."""
    answers = [http_classify(server, model, x, output, k, True, input_name),
               http_classify(server, model, x, output, k, False, input_name),
               grpc_classify(server, model, x, output, k, input_name)]
    shapes = {tuple(a.shape) for a in answers}
    texts = {tuple(strings(a)) for a in answers}
    assert len(shapes) == 1 and len(texts) == 1, (shapes, texts)
    return list(answers[0].shape), list(texts.pop())


def http_raw(server, model: str, body: dict) -> tuple[int, dict, bytes]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/{model}/infer",
                                     data=data, method="POST")
    try:
        with urllib.request.urlopen(request) as reply:
            payload, header = reply.read(), reply.headers.get("Inference-Header-Content-Length")
            status = reply.status
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), b""
    size = int(header) if header is not None else len(payload)
    return status, json.loads(payload[:size]), payload[size:]


def json_request(x: np.ndarray, outputs: list[dict], input_name: str = "IN") -> dict:
    return {"inputs": [{"name": input_name, "datatype": "FP32", "shape": list(x.shape),
                        "data": x.ravel().tolist()}], "outputs": outputs}


def grpc_error(server, model: str, output: str, kind: str, value) -> str:
    """The status of a ModelInfer whose output's `classification` is `value` as `kind`
    (tritonclient only sends int64_param)."""
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="IN", datatype="FP32", shape=list(X1.shape))
    request.raw_input_contents.append(X1.tobytes())
    requested = request.outputs.add(name=output)
    setattr(requested.parameters["classification"], kind, value)
    with grpc.insecure_channel(server.grpc_url) as channel:
        try:
            GRPCInferenceServiceStub(channel).ModelInfer(request)
        except grpc.RpcError as err:
            return f"{err.code().name}: {err.details()}"
    return "OK"


# -- Triton 2.51's answers -------------------------------------------------------------

def test_extension_listed_by_both_frontends(server) -> None:
    assert "classification" in server.http_client().get_server_metadata()["extensions"]
    assert "classification" in server.grpc_client().get_server_metadata().extensions


def test_unbatched_python_model_with_labels(server) -> None:
    assert both(server, "cast", X1, "OUT", 3) == (
        [3], ["7.250000:4:four", "3.000000:6:six", "2.000000:1:one"])
    # the same binary request again: its header decoded once and kept (known_headers.py)
    for _ in range(2):
        assert strings(http_classify(server, "cast", X1[::-1].copy(), "OUT", 2)) == [
            "7.250000:2:two", "3.000000:0:zero"]
    assert both(server, "cast", X1, "I32", 3) == ([3], ["7:4:four", "3:6:six", "2:1:one"])


def test_unbatched_python_model_without_labels(server) -> None:
    assert both(server, "cast", X1, "PLAIN", 3) == (
        [3], ["7.250000:4", "3.000000:6", "2.000000:1"])
    assert both(server, "cast", X1, "F64", 1) == ([1], ["7.250000:4"])
    assert both(server, "cast", X1, "I16", 3) == ([3], ["7:4", "3:6", "2:1"])


def test_batched_python_model_classifies_each_item(server) -> None:
    assert both(server, "cast_b", XB, "OUT", 3) == ([2, 3], [
        "2.000000:1:one", "2.000000:3:three", "0.500000:0:zero",
        "100000002004087734272.000000:1:one", "9.000000:0:zero", "3.300000:3:three"])
    assert both(server, "cast_b", XB, "F64", 1) == (
        [2, 1], ["2.000000:1", "100000002004087734272.000000:1"])


def test_k_larger_than_the_output_is_cut(server) -> None:
    assert both(server, "cast_b", XB, "OUT", 100) == ([2, 4], [
        "2.000000:1:one", "2.000000:3:three", "0.500000:0:zero", "-1.000000:2:two",
        "100000002004087734272.000000:1:one", "9.000000:0:zero", "3.300000:3:three",
        "-0.000000:2:two"])
    assert both(server, "cast", X1, "PLAIN", 100)[0] == [7]


def test_label_file_lines_as_triton_reads_them(server) -> None:
    shape, texts = both(server, "cast", X1, "ODD", 100)
    assert shape == [7] and texts == [
        "7.250000:4:  sp  ", "3.000000:6", "2.000000:1", "2.000000:3:ünï", "0.500000:0:a:b",
        "0.000000:5:last-no-newline", "-1.000000:2:cr\r"]


def test_binary_output_bytes(server) -> None:
    status, head, data = http_raw(server, "cast_b", json_request(
        XB, [{"name": "OUT", "parameters": {"classification": 3, "binary_data": True}}]))
    assert status == 200
    assert head["outputs"] == [{"name": "OUT", "datatype": "BYTES", "shape": [2, 3],
                                "parameters": {"binary_data_size": 134}}]
    assert data.hex() == (
        "0e000000322e3030303030303a313a6f6e6510000000322e3030303030303a333a7468726565"
        "0f000000302e3530303030303a303a7a65726f2200000031303030303030303230303430383737"
        "33343237322e3030303030303a313a6f6e650f000000392e3030303030303a303a7a65726f1000"
        "0000332e3330303030303a333a7468726565")


def test_other_outputs_are_left_as_they_are(server) -> None:
    status, head, _ = http_raw(server, "cast", json_request(
        X1, [{"name": "OUT", "parameters": {"classification": 2}}, {"name": "I32"}]))
    assert status == 200 and head["outputs"] == [
        {"name": "OUT", "datatype": "BYTES", "shape": [2],
         "data": ["7.250000:4:four", "3.000000:6:six"]},
        {"name": "I32", "datatype": "INT32", "shape": [7], "data": [0, 2, -1, 2, 7, 0, 3]}]
    # 0 over HTTP asks for the plain output
    status, head, _ = http_raw(server, "cast", json_request(
        X1, [{"name": "OUT", "parameters": {"classification": 0}}]))
    assert status == 200 and head["outputs"][0]["datatype"] == "FP32"


def test_ties_and_nan_in_tritons_order(server) -> None:
    ties = np.array([1.0] * 10 + [2.0] * 10 + [0.5] * 20, np.float32)  # introsort's order
    assert both(server, "cast", ties, "OUT", 15)[1] == [
        "2.000000:19:nineteen", "2.000000:18:eighteen", "2.000000:17:seventeen",
        "2.000000:16:sixteen", "2.000000:15:fifteen", "2.000000:14:fourteen",
        "2.000000:13:thirteen", "2.000000:12:twelve", "2.000000:10:ten",
        "2.000000:11:eleven", "1.000000:1:one", "1.000000:0:zero", "1.000000:8:eight",
        "1.000000:7:seven", "1.000000:6:six"]
    few = np.array([1, 3, 1, 3, 2, 3, 1, 2, 0, 3, 2, 1], np.float32)  # insertion sort's
    assert both(server, "cast", few, "I32", 12)[1] == [
        "3:1:one", "3:3:three", "3:5:five", "3:9:nine", "2:4:four", "2:7:seven",
        "2:10:ten", "1:0:zero", "1:2:two", "1:6:six", "1:11:eleven", "0:8:eight"]
    special = np.array([np.nan, 1.0, np.inf, -np.inf, 1e-7, 123456789.0, -2.5], np.float32)
    assert both(server, "cast", special, "F64", 7)[1] == [
        "nan:0", "inf:2", "123456792.000000:5", "1.000000:1", "0.000000:4", "-2.500000:6",
        "-inf:3"]


def test_unsupported_datatypes_are_refused(server) -> None:
    for output, datatype in (("HALF", "FP16"), ("FLAG", "BOOL"), ("TEXT", "BYTES")):
        message = (f"class result not available for output due to unsupported type "
                   f"'{datatype}'")
        status, body, _ = http_raw(server, "cast_b", json_request(
            XB, [{"name": output, "parameters": {"classification": 3}}]))
        assert (status, body) == (400, {"error": message})
        with pytest.raises(InferenceServerException) as err:
            grpc_classify(server, "cast", X1, output, 3)
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert err.value.message() == message


def test_class_count_parameter_checks(server) -> None:
    for kind, value in (("uint64_param", 3), ("string_param", "3"), ("bool_param", True),
                        ("double_param", 2.0)):
        assert grpc_error(server, "cast", "OUT", kind, value) == (
            "INVALID_ARGUMENT: invalid value type for 'classification' parameter, "
            "expected int64_param")
    for value in (0, -2):
        assert grpc_error(server, "cast", "OUT", "int64_param", value) == (
            "INVALID_ARGUMENT: invalid value for 'classification' parameter, "
            "expected >= 0")
    # Triton keeps a uint32: 2**33 is 0 classes
    client = server.grpc_client()
    inp = grpcclient.InferInput("IN", list(X1.shape), "FP32")
    inp.set_data_from_numpy(X1)
    result = client.infer("cast", [inp], outputs=[
        grpcclient.InferRequestedOutput("OUT", class_count=1 << 33)])
    assert list(result.get_output("OUT").shape) == [0]
    for value in ("3", -1, 2.5, True, None):  # Triton: 500
        status, body, _ = http_raw(server, "cast", json_request(
            X1, [{"name": "OUT", "parameters": {"classification": value}}]))
        assert (status, body) == (400, {"error": (
            "Unable to set 'classification': attempt to access JSON "
            "non-unsigned-integer as unsigned-integer")})
    status, body, _ = http_raw(server, "cast", json_request(
        X1, [{"name": "OUT", "parameters": {"classification": 2,
                                            "shared_memory_region": "r"}}]))
    assert (status, body) == (400, {"error": (
        "Output can't set both 'shared_memory_region' and 'classification'")})


def test_ensemble_outputs_take_labels_from_their_step_or_their_own(server) -> None:
    item0 = ["2.000000:1", "2.000000:3", "0.500000:0"]
    item1 = ["100000002004087734272.000000:1", "9.000000:0", "3.300000:3"]
    step_labels = ["one", "three", "zero", "one", "zero", "three"]
    own_labels = ["E1", "E3", "E0", "E1", "E0", "E3"]
    plain = item0 + item1
    assert both(server, "ens", XB, "Y", 3, "X") == (
        [2, 3], [f"{p}:{label}" for p, label in zip(plain, step_labels)])
    assert both(server, "ens", XB, "Y_OWN", 3, "X") == (
        [2, 3], [f"{p}:{label}" for p, label in zip(plain, own_labels)])
    assert both(server, "ens", XB, "Y_NL", 3, "X") == ([2, 3], plain)


# -- beyond what 2.51 answers -----------------------------------------------------------

def test_onnx_model(server) -> None:
    x = np.array([[0.1, 0.7, 0.2, 0.0, 0.5], [3, 1, 2, 5, 4]], np.float32)
    assert both(server, "onnx_cls", x, "PROB", 2, "X") == (
        [2, 2], ["0.700000:1:dog", "0.500000:4:horse", "5.000000:3:fish",
                 "4.000000:4:horse"])
    assert both(server, "onnx_cls", x, "NEG", 1, "X") == (
        [2, 1], ["-0.000000:3", "-1.000000:1"])


def test_torchscript_model(server) -> None:
    if not server.with_torch:
        pytest.skip("torch is not installed")
    x = np.array([[1, 3, 2]], np.float32)
    assert both(server, "torch_cls", x, "OUTPUT__0", 5, "INPUT__0") == (
        [1, 3], ["6.000000:1:green", "4.000000:2:blue", "2.000000:0:red"])


def test_empty_output(server) -> None:  # Triton 2.51's server dies on these
    empty = np.zeros((0,), np.float32)
    assert both(server, "cast", empty, "OUT", 3) == ([0], [])
    assert both(server, "cast_b", np.zeros((2, 0), np.float32), "OUT", 3) == ([2, 0], [])


def test_label_files_that_cannot_be_read(server) -> None:
    status, body, _ = http_raw(server, "cast", json_request(
        X1, [{"name": "MISSING", "parameters": {"classification": 1}}]))
    assert status == 500
    assert body["error"].startswith("failed to open text file for read ")
    assert body["error"].endswith("nope.txt: No such file or directory")
    status, body, _ = http_raw(server, "cast", json_request(
        X1, [{"name": "ESCAPES", "parameters": {"classification": 1}}]))
    assert status == 501
    assert body["error"].endswith("/cast/../labels.txt' for output 'ESCAPES' in model "
                                  "'cast' is outside model directory")


def test_grpc_stream_classifies_each_response(server) -> None:
    answers: queue.Queue = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        x = np.array([0.5, 2.0, 1.0], np.float32)
        for model in ("two", "cast"):
            inp = grpcclient.InferInput("IN", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            client.async_stream_infer(model, [inp], outputs=[
                grpcclient.InferRequestedOutput("OUT", class_count=2)])
            count = 2 if model == "two" else 1
            got = []
            for _ in range(count):
                result, error = answers.get(timeout=30)
                assert error is None
                got.append(strings(result.as_numpy("OUT")))
            if model == "two":
                assert got == [["2.000000:1:L1", "1.000000:2:L2"],
                               ["-0.500000:0:L0", "-1.000000:2:L2"]]
            else:
                assert got == [["2.000000:1:one", "1.000000:2:two"]]
        inp = grpcclient.InferInput("IN", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        client.async_stream_infer("cast", [inp], outputs=[
            grpcclient.InferRequestedOutput("TEXT", class_count=2)])
        result, error = answers.get(timeout=30)
        assert result is None and "unsupported type 'BYTES'" in error.message()
    finally:
        client.stop_stream()


def test_the_sort_replay_against_numpy_where_the_order_is_unique() -> None:
    rng = np.random.default_rng(3)
    for size in (1, 5, 16, 17, 100, 1000):
        values = rng.permutation(size).astype(np.float64)
        assert _std_sort(values.tolist()) == np.argsort(-values).tolist()
    big = np.arange(10_000, dtype=np.int64) % 7  # past the replay: ties by index
    assert _top_indices(big, 3) == [6, 13, 20]
    huge = np.array([2**64 - 1, 2**64 - 2, 2**63, 5], np.uint64)  # exact, not via floats
    assert _top_indices(huge, 4) == [0, 1, 2, 3]

