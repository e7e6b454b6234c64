"""The HTTP frontend against the real tritonclient.http, over a fake in-process core.

The server runs on its own event loop in a background thread (tritonclient.http is
synchronous); the fake core implements a few models with numpy over the raw bytes
and counts the responses it made and those the frontend released.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

import fakes
from fakes import assert_all_released
from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.errors import internal, invalid_arg, unavailable
from pbserve.server import jsonio
from pbserve.server.connections import ConnectionSet
from pbserve.server.http.limits import HttpLimits
from pbserve.server.http.server import start_http_server, start_metrics_server
from pbserve.server.http.messages import HttpReply, HttpStreamReply
from pbserve.server.http.protocol import HttpConnection

NUMPY = {"BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
         "INT64": np.int64, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
         "UINT64": np.uint64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64}


def to_bytes_layout(items: list[bytes]) -> bytes:
    return b"".join(len(x).to_bytes(4, "little") + x for x in items)


# --- the fake core ---------------------------------------------------------------------

class FakeCore(fakes.FakeCore):
    """Models: add_sub (FP32 [4]), identity (IN* -> OUT*, any dtype), error_model,
    params (echoes what the frontend decoded), repeat (decoupled), fp16_out, text
    (generate: upper-cases text_input), sleepy (unavailable)."""

    DECOUPLED: ClassVar[frozenset[str]] = frozenset({"repeat"})
    MODELS: ClassVar[frozenset[str]] = frozenset({
        "add_sub", "identity", "error_model", "params", "repeat", "fp16_out", "text", "sleepy"})

    def __init__(self) -> None:
        super().__init__()
        self.last_request: InferRequest | None = None

    # metadata
    def server_metadata(self) -> dict[str, Any]:
        return {"name": "pbserve", "version": "0.1.0", "extensions": ["binary_tensor_data"]}

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        self._check(name, version)
        tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [4]}
        if name == "text":
            tensor = {"name": "text_input", "datatype": "BYTES", "shape": [-1]}
        elif name == "repeat":
            tensor = {"name": "N", "datatype": "INT32", "shape": [1]}
        return {"name": name, "versions": ["1"], "platform": "python",
                "inputs": [tensor], "outputs": []}

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        self._check(name, version)
        return {"name": name, "backend": "python", "max_batch_size": 0,
                "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}]}

    def metrics_text(self) -> str:
        return ('# TYPE nv_inference_request_success counter\n'
                'nv_inference_request_success{model="add_sub",version="1"} 3\n')

    # inference
    async def infer(self, request: InferRequest) -> InferResponse:
        self.last_request = request
        self._check(request.model_name, request.model_version)
        if request.model_name == "sleepy":
            raise unavailable("model 'sleepy' is not ready")
        if request.model_name == "error_model":
            return self._response(request, [], internal("Failed to process the request(s) "
                                                        "for model 'error_model': boom"))
        return self._response(request, getattr(self, "_run_" + request.model_name)(request))

    def _run_add_sub(self, request: InferRequest) -> list[TensorData]:
        arrays = {}
        for tensor in request.inputs:
            if tensor.datatype != "FP32":
                raise invalid_arg(f"inference input '{tensor.name}' data-type is "
                                  f"'{tensor.datatype}', but model 'add_sub' expects 'FP32'")
            if tensor.shape != (4,):
                raise invalid_arg(f"unexpected shape for input '{tensor.name}' for model "
                                  f"'add_sub'. Expected [4], got {list(tensor.shape)}")
            arrays[tensor.name] = np.frombuffer(tensor.data, np.float32)
        a, b = arrays["INPUT0"], arrays["INPUT1"]
        return [TensorData("OUTPUT0", "FP32", (4,), memoryview(a + b)),
                TensorData("OUTPUT1", "FP32", (4,), memoryview(a - b))]

    def _run_identity(self, request: InferRequest) -> list[TensorData]:
        return [TensorData("OUT" + t.name[2:], t.datatype, t.shape, bytearray(t.data))
                for t in request.inputs]

    def _run_fp16_out(self, request: InferRequest) -> list[TensorData]:
        half = np.array([1.5, -2.0], np.float16)
        return [TensorData("HALF", "FP16", (2,), memoryview(half)),
                TensorData("NUM", "INT32", (1,), np.array([7], np.int32).tobytes())]

    def _run_params(self, request: InferRequest) -> list[TensorData]:
        seen = {"parameters": request.parameters, "correlation_id": request.correlation_id,
                "flags": request.flags, "priority": request.priority,
                "timeout_us": request.timeout_us, "id": request.id}
        return [TensorData("SEEN", "BYTES", (1,), to_bytes_layout([json.dumps(seen).encode()]))]

    def _run_text(self, request: InferRequest) -> list[TensorData]:
        text = request.inputs[0].data[4:].tobytes() if isinstance(
            request.inputs[0].data, memoryview) else bytes(request.inputs[0].data[4:])
        return [TensorData("text_output", "BYTES", (1,), to_bytes_layout([text.upper()]))]

    async def stream_infer(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        self._check(request.model_name)
        count = int(np.frombuffer(request.inputs[0].data, np.int32)[0])
        for i in range(count):
            await asyncio.sleep(0)
            yield self._response(request, [TensorData("OUT", "INT32", (1,),
                                                      np.array([i], np.int32).tobytes())],
                                 final=False)
        yield self._response(request, [], final=True)


# --- fixtures --------------------------------------------------------------------------

class ServerThread(fakes.ServerThread):
    """Both servers on one event loop in a daemon thread; `linked`: the HTTP server
    reaches the core as a frontend process does (--frontend-processes, over shm)."""

    def __init__(self, loop: str, linked: bool = False) -> None:
        core = FakeCore()
        self.linked = fakes.LinkedCore(core) if linked else None
        super().__init__(core, loop)

    async def start(self) -> None:
        served = self.linked.frontend() if self.linked is not None else self.core
        self.http = await start_http_server(served, "127.0.0.1", 0)
        self.metrics = await start_metrics_server(self.core, "127.0.0.1", 0)

    async def close(self) -> None:
        await self.http.close()
        await self.metrics.close()
        if self.linked is not None:
            self.linked.linked.close()

    def stop(self) -> None:
        super().stop()
        if self.linked is not None:
            self.linked.stop()


@pytest.fixture(scope="module", params=["asyncio", "uvloop", "frontend-process"])
def server(request):
    running = ServerThread("uvloop" if request.param == "frontend-process"
                           else request.param, linked=request.param == "frontend-process")
    yield running
    running.stop()


@pytest.fixture
def client(server):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http.port}")
    yield client
    client.close()
    assert_all_released(server.core)


@pytest.fixture
def core(server) -> FakeCore:
    return server.core


def h_in(name: str, array: np.ndarray, binary: bool = True) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def h_out(name: str, binary: bool = True) -> httpclient.InferRequestedOutput:
    return httpclient.InferRequestedOutput(name, binary_data=binary)


def raw(server: ServerThread, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None, port: int | None = None):
    """(status, headers, body) of one request with urllib (no client-side checks)."""
    url = f"http://127.0.0.1:{port or server.http.port}{path}"
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def infer_body(inputs: list[dict], binary: bytes = b"", **extra) -> tuple[bytes, dict]:
    header = json.dumps({"inputs": inputs, **extra}).encode()
    return header + binary, {"Inference-Header-Content-Length": str(len(header))}


A4 = np.array([1.5, 2.0, -3.25, 1.0e6], np.float32)
B4 = np.array([0.25, -8.0, 3.25, 7.0], np.float32)


def samples() -> dict[str, np.ndarray]:
    def ints(dtype):
        info = np.iinfo(dtype)
        return np.array([info.min, 0, 1, info.max], dtype=dtype)

    values = {k: ints(v) for k, v in NUMPY.items() if k.startswith(("INT", "UINT"))}
    values["BOOL"] = np.array([True, False, True])
    values["FP16"] = np.array([1.5, -0.0, 65504.0, np.inf, 6e-8], np.float16)
    values["FP32"] = np.array([1.5, -0.0, 3.4028235e38, -np.inf, 1e-45], np.float32)
    values["FP64"] = np.array([0.1, -0.0, 1.7976931348623157e308, np.inf, 5e-324])
    values["BYTES"] = np.array([b"", b"abc", b"\x00\xff\xfe raw", "h\u00e9llo".encode()],
                               dtype=np.object_)
    return values


def same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual is not None and actual.shape == expected.shape
    if expected.dtype == np.object_:
        as_bytes = [x.encode() if isinstance(x, str) else bytes(x) for x in actual.ravel()]
        assert as_bytes == list(expected.ravel())
    else:
        assert actual.dtype == expected.dtype and actual.tobytes() == expected.tobytes()


# --- inference -------------------------------------------------------------------------

def test_binary_tensors_round_trip_with_id_and_version(client, core):
    result = client.infer("add_sub", [h_in("INPUT0", A4), h_in("INPUT1", B4)],
                          request_id="req-1")
    assert core.expected == [("add_sub", "")]  # announced before the body was decoded
    same(result.as_numpy("OUTPUT0"), A4 + B4)
    same(result.as_numpy("OUTPUT1"), A4 - B4)
    response = result.get_response()
    assert (response["model_name"], response["model_version"], response["id"]) == \
        ("add_sub", "1", "req-1")


def test_json_tensors_round_trip(client):
    result = client.infer("add_sub", [h_in("INPUT0", A4, False), h_in("INPUT1", B4, False)],
                          outputs=[h_out("OUTPUT0", False), h_out("OUTPUT1", False)])
    assert "data" in result.get_output("OUTPUT0")
    same(result.as_numpy("OUTPUT0"), A4 + B4)
    same(result.as_numpy("OUTPUT1"), A4 - B4)


def test_requested_outputs_only(client):
    result = client.infer("add_sub", [h_in("INPUT0", A4), h_in("INPUT1", B4)],
                          outputs=[h_out("OUTPUT1")])
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]


def test_every_dtype_binary_is_bit_exact(client):
    values = samples()
    result = client.infer("identity", [h_in("IN_" + k, v) for k, v in values.items()])
    for k, v in values.items():
        same(result.as_numpy("OUT_" + k), v)


def test_every_dtype_json_with_fp16_binary(client):
    values = samples()
    values["FP16"] = np.array([1.5, -0.0, 1024.0], np.float16)
    values["FP32"] = np.array([1.5, -0.0, 1024.25, 0.1], np.float32)
    values["FP64"] = np.array([0.5, -0.0, 1.5e10])
    values["BYTES"] = np.array([b"", b"abc", "h\u00e9llo".encode()], dtype=np.object_)
    inputs = [h_in("IN_" + k, v, binary=(k == "FP16")) for k, v in values.items()]
    result = client.infer("identity", inputs, outputs=[h_out("OUT_" + k, False) for k in values])
    for k, v in values.items():
        out = result.get_output("OUT_" + k)
        assert ("data" in out) == (k != "FP16"), k  # FP16 cannot be JSON: sent binary
        got = result.as_numpy("OUT_" + k)
        same(got if k == "BYTES" else got.astype(v.dtype), v)


def test_json_impossible_outputs_fall_back_to_binary(client):
    inf = np.array([np.inf, 1.0], np.float32)
    raw_bytes = np.array([b"\xff\xfe"], dtype=np.object_)
    result = client.infer("identity", [h_in("IN_A", inf), h_in("IN_B", raw_bytes)],
                          outputs=[h_out("OUT_A", False), h_out("OUT_B", False)])
    assert "binary_data_size" in result.get_output("OUT_A")["parameters"]
    same(result.as_numpy("OUT_A"), inf)
    same(result.as_numpy("OUT_B"), raw_bytes)


def test_fp16_output_without_outputs_list_is_binary_by_default(client):
    # tritonclient sets binary_data_output when no outputs are listed
    result = client.infer("fp16_out", [h_in("INPUT0", A4)])
    same(result.as_numpy("HALF"), np.array([1.5, -2.0], np.float16))


def test_bytes_tensors_json_and_binary(client):
    words = np.array([b"hello", "Gr\u00fc\u00dfe".encode(), b"", "\u65e5".encode()],
                     dtype=np.object_).reshape(2, 2)
    for binary in (True, False):
        result = client.infer("identity", [h_in("IN_T", words, binary)],
                              outputs=[h_out("OUT_T", binary)])
        same(result.as_numpy("OUT_T"), words)


def test_empty_tensors(client):
    empty = np.zeros((0, 3), np.float32)
    result = client.infer("identity", [h_in("IN_E", empty)])
    same(result.as_numpy("OUT_E"), empty)


def test_64_mib_tensor_round_trips(client):
    big = np.random.default_rng(1).standard_normal(16 * 1024 * 1024, dtype=np.float32)
    result = client.infer("identity", [h_in("INPUT0", big)])
    assert np.array_equal(result.as_numpy("OUTPUT0"), big)


def test_request_parameters_reach_request_fields(client, core):
    params = {"text": "hi", "count": 7, "flag": True, "ratio": 0.5}
    result = client.infer("params", [h_in("IN_X", A4)], parameters=params, request_id="p",
                          sequence_id=42, sequence_start=True, sequence_end=True,
                          priority=3, timeout=1500)
    seen = json.loads(result.as_numpy("SEEN")[0])
    assert seen == {"parameters": params, "correlation_id": 42, "flags": 3, "priority": 3,
                    "timeout_us": 1500, "id": "p"}
    result = client.infer("params", [h_in("IN_X", A4)], sequence_id="seq-a")
    seen = json.loads(result.as_numpy("SEEN")[0])
    assert (seen["correlation_id"], seen["flags"]) == ("seq-a", 0)


def test_compressed_request_and_response(client):
    for request_algo, response_algo in (("gzip", "deflate"), ("deflate", "gzip")):
        result = client.infer("add_sub", [h_in("INPUT0", A4), h_in("INPUT1", B4)],
                              request_compression_algorithm=request_algo,
                              response_compression_algorithm=response_algo)
        same(result.as_numpy("OUTPUT0"), A4 + B4)


# --- errors ------------------------------------------------------------------------------

def error_of(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def test_wrong_shape_and_dtype_are_400_naming_the_input(client):
    err = error_of(lambda: client.infer("add_sub", [h_in("INPUT0", A4[:3]),
                                                    h_in("INPUT1", B4)]))
    assert err.status() == "400" and "INPUT0" in err.message()
    err = error_of(lambda: client.infer("add_sub", [h_in("INPUT0", A4.astype(np.float64)),
                                                    h_in("INPUT1", B4)]))
    assert err.status() == "400" and "FP64" in err.message()


def test_unknown_model_is_404_naming_it(client):
    err = error_of(lambda: client.infer("nope", [h_in("INPUT0", A4)]))
    assert err.status() == "404" and "nope" in err.message()
    same(client.infer("add_sub", [h_in("INPUT0", A4), h_in("INPUT1", B4)])
         .as_numpy("OUTPUT0"), A4 + B4)


def test_unavailable_model_is_503(client):
    err = error_of(lambda: client.infer("sleepy", [h_in("INPUT0", A4)]))
    assert err.status() == "503" and "sleepy" in err.message()


def test_model_error_is_500_with_its_message(client):
    err = error_of(lambda: client.infer("error_model", [h_in("INPUT0", A4)]))
    assert err.status() == "500" and "boom" in err.message()


def test_decoupled_model_refused_on_infer(client):
    err = error_of(lambda: client.infer("repeat", [h_in("N", np.array([1], np.int32))]))
    assert err.status() == "501" and "decoupled" in err.message()


def test_triton_prefixed_parameter_is_400(server):
    body = json.dumps({"inputs": [], "parameters": {"triton_x": 1}}).encode()
    status, _, reply = raw(server, "POST", "/v2/models/params/infer", body)
    assert status == 400 and "triton_" in json.loads(reply)["error"]


def test_malformed_json_is_400(server):
    status, _, body = raw(server, "POST", "/v2/models/add_sub/infer", b"{not json")
    assert status == 400 and "failed to parse the request JSON" in json.loads(body)["error"]


def test_binary_size_mismatches_are_400(server):
    inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [4],
               "parameters": {"binary_data_size": 16}}]
    body, headers = infer_body(inputs, A4.tobytes()[:12])
    status, _, reply = raw(server, "POST", "/v2/models/add_sub/infer", body, headers)
    assert status == 400 and "unexpected size for input 'INPUT0'" in json.loads(reply)["error"]
    body, headers = infer_body(inputs, A4.tobytes() + b"xx")
    status, _, reply = raw(server, "POST", "/v2/models/add_sub/infer", body, headers)
    assert status == 400 and "unexpected additional input data" in json.loads(reply)["error"]
    status, _, reply = raw(server, "POST", "/v2/models/add_sub/infer", body,
                           {"Inference-Header-Content-Length": "99999"})
    assert status == 400 and "inference header size" in json.loads(reply)["error"]


@pytest.mark.parametrize("tensor, message", [
    ({"datatype": "INT32", "shape": [2], "data": ["a", "b"]}, "expected INT32 values"),
    ({"datatype": "INT32", "shape": [3], "data": [1, 2]}, "needs 3 elements"),
    ({"datatype": "INT8", "shape": [1], "data": [300]}, "out of the range of INT8"),
    ({"datatype": "BYTES", "shape": [1], "data": [1]}, "must be strings"),
    ({"datatype": "FP32", "shape": [2], "data": [[1.0], [2.0, 3.0]]}, "rectangular"),
    ({"datatype": "FP32", "shape": [1]}, "no field is set"),
    ({"datatype": "FP32", "shape": [-1], "data": [1.0]}, "Unable to parse 'shape'"),
])
def test_bad_json_tensor_data_is_400_naming_the_problem(server, tensor, message):
    body = json.dumps({"inputs": [{"name": "IN_Q", **tensor}]}).encode()
    status, _, reply = raw(server, "POST", "/v2/models/identity/infer", body)
    error = json.loads(reply)["error"]
    assert status == 400 and message in error and "IN_Q" in error


def test_nested_json_data_is_accepted(client, server):
    body = json.dumps({"inputs": [{"name": "IN_N", "datatype": "INT16", "shape": [2, 2],
                                   "data": [[1, 2], [3, 4]]}]}).encode()
    status, _, reply = raw(server, "POST", "/v2/models/identity/infer", body)
    assert status == 200 and json.loads(reply)["outputs"][0]["data"] == [1, 2, 3, 4]


def test_unknown_route_and_wrong_method(server):
    for path in ("/v2/nothing", "/v3", "/v2/models/add_sub/versions/x/infer",
                 "/v2/models/add_sub/explode"):
        status, _, body = raw(server, "GET", path)
        assert (status, json.loads(body)) == (404, {"error": "Not Found"}), path
    status, _, body = raw(server, "GET", "/v2/models/add_sub/infer")
    assert (status, json.loads(body)) == (405, {"error": "Method Not Allowed"})


# --- metadata, health, repository, metrics ---------------------------------------------

def test_health_metadata_and_config(client, server):
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata()["name"] == "pbserve"
    assert client.is_model_ready("add_sub") and client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("nope") and not client.is_model_ready("sleepy")
    assert raw(server, "GET", "/v2/models/nope/ready")[0] == 400
    meta = client.get_model_metadata("add_sub")
    assert meta["platform"] == "python" and meta["inputs"][0]["shape"] == [4]
    assert client.get_model_config("add_sub", "1")["max_batch_size"] == 0
    err = error_of(lambda: client.get_model_metadata("nope"))
    assert err.status() == "404" and "nope" in err.message()
    stats = client.get_inference_statistics("add_sub")
    assert stats["model_stats"][0]["name"] == "add_sub"


def test_repository_index_load_and_unload(client, core):
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["add_sub"]["state"] == "READY"
    client.unload_model("params", unload_dependents=True)
    assert core.unloads[-1] == ("params", True)
    assert not client.is_model_ready("params")
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["params"]["state"] == "UNAVAILABLE"
    err = error_of(lambda: client.infer("params", [h_in("IN_X", A4)]))
    assert err.status() == "404"
    client.load_model("params", config='{"max_batch_size": 0}', files={"file:1/model.py": b"x"})
    assert core.loads[-1] == ("params", '{"max_batch_size": 0}', {"file:1/model.py": b"x"})
    assert client.is_model_ready("params")
    err = error_of(lambda: client.load_model("broken"))
    assert err.status() == "400" and "SyntaxError" in err.message()


def test_repository_index_ready_filter(server, core):
    core.unloaded.add("text")
    try:
        status, _, body = raw(server, "POST", "/v2/repository/index", b'{"ready": true}')
        assert status == 200 and "text" not in {m["name"] for m in json.loads(body)}
        status, _, body = raw(server, "POST", "/v2/repository/index", b'{"ready": 1}')
        assert status == 400
    finally:
        core.unloaded.discard("text")


def test_load_with_bad_base64_is_400(server):
    body = json.dumps({"parameters": {"file:1/model.py": "%%%"}}).encode()
    status, _, reply = raw(server, "POST", "/v2/repository/models/params/load", body)
    assert status == 400 and "file:1/model.py" in json.loads(reply)["error"]
    body = json.dumps({"parameters": {"file:1/model.py": base64.b64encode(b"ok").decode()}})
    assert raw(server, "POST", "/v2/repository/models/params/load", body.encode())[0] == 200


def test_metrics_endpoint(server):
    status, headers, body = raw(server, "GET", "/metrics", port=server.metrics.port)
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b'nv_inference_request_success{model="add_sub",version="1"} 3' in body
    assert raw(server, "GET", "/other", port=server.metrics.port)[0] == 404


# --- raw HTTP behaviour -------------------------------------------------------------------

def exchange(server: ServerThread, data: bytes, replies: int) -> bytes:
    """Send raw bytes on one connection and read until `replies` replies arrived."""
    with socket.create_connection(("127.0.0.1", server.http.port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while received.count(b"HTTP/1.1 ") < replies or not received.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        return received


def test_pipelined_requests_are_answered_in_order(server):
    body, _ = infer_body([{"name": "IN_P", "datatype": "INT32", "shape": [1],
                                 "data": [5]}])
    infer = (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
             b"\r\n" % len(body)) + body
    meta = b"GET /v2/models/add_sub HTTP/1.1\r\nHost: x\r\n\r\n"
    received = exchange(server, infer + meta + infer, 3)
    assert received.count(b"HTTP/1.1 200 OK") == 3
    first, second = received.find(b'"OUT_P"'), received.find(b'"platform"')
    assert 0 < first < second < received.rfind(b'"OUT_P"')


def test_expect_continue_and_chunked_body(server):
    body = json.dumps({"inputs": [{"name": "IN_C", "datatype": "INT32", "shape": [1],
                                   "data": [9]}]}).encode()
    request = (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
               b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    received = exchange(server, request, 2)
    assert received.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")
    assert b'"data":[9]' in received


def test_malformed_http_is_400_and_closes(server):
    received = exchange(server, b"BLAH\x00 / HTTP/1.1\r\n\r\n", 1)
    assert received.startswith(b"HTTP/1.1 400")


def test_an_endless_head_is_431_and_closes_and_the_server_serves_on(server):
    with socket.create_connection(("127.0.0.1", server.http.port), timeout=10) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: ")
        received = b""
        try:
            for _ in range(64):  # 64 x 16 KiB of one header value, never ended
                time.sleep(0.005)
                sock.sendall(b"a" * 16384)
        except OSError:  # the server closed the connection while we were still sending
            pass
        while chunk := sock.recv(65536):
            received += chunk
    assert received.startswith(b"HTTP/1.1 431"), received[:200]
    assert b"exceed" in received
    assert raw(server, "GET", "/v2/health/live")[0] == 200


# --- large infer bodies: their binary inputs gathered by the core's placer -----------

def placer_settled(core: FakeCore) -> bool:
    """Whether everything placed came back (the connection gives back what no request
    took; the fake core takes nothing), waiting a little for the server's thread."""
    deadline = time.monotonic() + 2
    while len(core.placer.dropped) != len(core.placer.placed) and time.monotonic() < deadline:
        time.sleep(0.005)
    return len(core.placer.dropped) == len(core.placer.placed)


def large_infer_head(model: str, body_size: int, header_size: int) -> bytes:
    return (b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
            b"Inference-Header-Content-Length: %d\r\n\r\n" % (model.encode(), body_size,
                                                                 header_size))


def test_a_large_binary_request_is_decoded_from_its_placed_inputs(server, client, core):
    if server.linked is not None:
        pytest.skip("a frontend process gathers into its own shm pool (tests/frontends)")
    big = np.arange(70_000, dtype=np.int32)
    small = np.array([7, 8, 9], dtype=np.int32)
    placed = len(core.placer.placed)
    result = client.infer("identity", [h_in("IN_A", big), h_in("IN_B", small),
                                       h_in("IN_J", small, binary=False)])
    assert np.array_equal(result.as_numpy("OUT_A"), big)
    assert np.array_equal(result.as_numpy("OUT_B"), small)
    assert np.array_equal(result.as_numpy("OUT_J"), small)
    assert [t.placed is not None for t in core.last_request.inputs] == [True, True, False]
    assert len(core.placer.placed) - placed == 2
    assert placer_settled(core)


def test_a_large_body_the_placer_does_not_gather_is_read_as_before(server, core):
    """Not placed: a JSON body, a compressed one, a path other than infer. Placed and
    given back: a large request for an unknown model."""
    if server.linked is not None:
        pytest.skip("a frontend process gathers into its own shm pool (tests/frontends)")
    data = list(range(20_000))
    json_body, _ = infer_body([{"name": "IN_X", "datatype": "INT32", "shape": [20_000],
                                "data": data}])
    placed = len(core.placer.placed)
    status, _, reply = raw(server, "POST", "/v2/models/identity/infer", json_body)
    assert status == 200 and json.loads(reply)["outputs"][0]["data"] == data
    big = np.arange(70_000, dtype=np.int32)
    body, headers = infer_body([{"name": "IN_X", "datatype": "INT32", "shape": [70_000],
                                 "parameters": {"binary_data_size": big.nbytes}}],
                               big.tobytes())
    status, _, reply = raw(server, "POST", "/v2/models/identity/generate", body, headers)
    assert status == 400  # the generate endpoint's own error, from the whole body
    assert len(core.placer.placed) == placed
    status, _, reply = raw(server, "POST", "/v2/models/no_such/infer", body, headers)
    assert status == 404 and b"no_such" in reply
    assert len(core.placer.placed) == placed + 1 and placer_settled(core)


def test_a_client_gone_halfway_through_a_large_body_leaves_nothing_placed(server, core):
    if server.linked is not None:
        pytest.skip("a frontend process gathers into its own shm pool (tests/frontends)")
    header = json.dumps({"inputs": [
        {"name": "IN_A", "datatype": "UINT8", "shape": [1 << 20],
         "parameters": {"binary_data_size": 1 << 20}},
        {"name": "IN_B", "datatype": "UINT8", "shape": [1 << 20],
         "parameters": {"binary_data_size": 1 << 20}}]}).encode()
    size = len(header) + (2 << 20)
    placed = len(core.placer.placed)
    with socket.create_connection(("127.0.0.1", server.http.port), timeout=10) as sock:
        sock.sendall(large_infer_head("identity", size, len(header)) + header +
                     bytes(1 << 19))
        deadline = time.monotonic() + 2
        while len(core.placer.placed) == placed and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(core.placer.placed) == placed + 1  # IN_A's block; IN_B's bytes never came
    assert placer_settled(core)
    # and two whole requests pipelined by a client that leaves without reading
    body = header + bytes(2 << 20)
    with socket.create_connection(("127.0.0.1", server.http.port), timeout=10) as sock:
        sock.sendall((large_infer_head("identity", size, len(header)) + body) * 2)
    assert placer_settled(core)
    assert raw(server, "GET", "/v2/health/ready")[0] == 200


def test_a_claimed_content_length_allocates_nothing_before_the_body_arrives(server):
    claimed = 256 * 1024 * 1024
    tracemalloc.start()
    try:
        with socket.create_connection(("127.0.0.1", server.http.port), timeout=10) as sock:
            sock.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: %d\r\n\r\n{" % claimed)
            time.sleep(0.3)  # the server has read the head and the first byte
            _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < claimed // 16


class StalledTransport(asyncio.Transport):
    """A peer that reads nothing: whatever is written stays in the transport's buffer,
    so the protocol is paused from the first write on."""

    def __init__(self, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.written: list[bytes] = []

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def write(self, data) -> None:
        self.written.append(bytes(data))
        self.protocol.pause_writing()

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


async def stalled_connection(handler) -> tuple[HttpConnection, StalledTransport]:
    connection = HttpConnection(handler, ConnectionSet(HttpLimits()))
    transport = StalledTransport(connection)
    connection.connection_made(transport)
    return connection, transport


async def test_replies_wait_for_a_peer_that_reads_none_of_them():
    handled = []

    async def handler(request):
        handled.append(request.path)
        return HttpReply(200, (b"{}",))

    connection, _ = await stalled_connection(handler)
    connection.data_received(b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n" * 10)
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(handled) == 1  # the next reply waits until the first one left
    connection.resume_writing()
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(handled) == 2
    connection.connection_lost(None)


async def test_a_stream_is_not_read_ahead_of_a_peer_that_reads_nothing():
    pulled = []

    async def events():
        for i in range(1000):
            await asyncio.sleep(0)
            pulled.append(i)
            yield b"data: {}\n\n"

    async def handler(request):
        return HttpStreamReply(events())

    connection, _ = await stalled_connection(handler)
    connection.data_received(b"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(pulled) <= 2
    connection.connection_lost(None)
    await asyncio.sleep(0)


# --- generate extension -----------------------------------------------------------------

def test_generate_single_response(server, core):
    body = json.dumps({"id": "g1", "text_input": "hello", "parameters": {"temp": 0.5}})
    status, _, reply = raw(server, "POST", "/v2/models/text/generate", body.encode())
    assert status == 200
    assert json.loads(reply) == {"model_name": "text", "model_version": "1", "id": "g1",
                                 "text_output": "HELLO"}
    assert core.last_request.parameters == {"temp": 0.5}
    assert core.last_request.inputs[0].shape == (1,)


def test_generate_stream_events(server, core):
    body = json.dumps({"N": 3}).encode()
    status, headers, reply = raw(server, "POST", "/v2/models/repeat/generate_stream", body)
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in reply.decode().split("\n\n") if line]
    assert [e["OUT"] for e in events] == [0, 1, 2]
    status, _, reply = raw(server, "POST", "/v2/models/repeat/generate", body)
    assert status == 500 and "exactly 1 response" in json.loads(reply)["error"]
    status, _, reply = raw(server, "POST", "/v2/models/repeat/generate",
                           json.dumps({"N": 1}).encode())
    assert status == 200 and json.loads(reply)["OUT"] == 0
    status, _, reply = raw(server, "POST", "/v2/models/text/generate_stream",
                           b'{"text_input": "abc"}')
    assert status == 200 and json.loads(reply.decode()[6:])["text_output"] == "ABC"
    assert_all_released(core)


def test_generate_errors(server):
    status, _, reply = raw(server, "POST", "/v2/models/nope/generate", b"{}")
    assert status == 404 and "nope" in json.loads(reply)["error"]
    status, _, reply = raw(server, "POST", "/v2/models/text/generate_stream",
                           b'{"text_input": {"a": 1}}')
    assert status == 400


def test_stdlib_json_fallback_gives_the_same_replies(client, monkeypatch):
    monkeypatch.setattr(jsonio, "loads", jsonio._std_loads)
    monkeypatch.setattr(jsonio, "dumps", jsonio._std_dumps)
    for binary in (True, False):
        result = client.infer("add_sub", [h_in("INPUT0", A4, binary), h_in("INPUT1", B4, binary)],
                              outputs=[h_out("OUTPUT0", binary)], request_id="std")
        same(result.as_numpy("OUTPUT0"), A4 + B4)
        assert result.get_response()["id"] == "std"
    err = error_of(lambda: client.infer("nope", [h_in("INPUT0", A4)]))
    assert err.status() == "404" and "nope" in err.message()
