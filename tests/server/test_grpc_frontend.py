"""The gRPC frontend against the real tritonclient.grpc (sync and aio), over a fake core.

The server runs on a uvloop event loop in a background thread (the sync client blocks);
the aio test runs a second server on the test's own asyncio loop. The fake core works
on the raw bytes, counts the responses it made and those the frontend released, and
records what it was asked, so each test can check the mapping it is about.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

import fakes
from client_inputs import grpc_input as g_in
from fakes import assert_all_released
from pbserve.core.memory.shared_memory import SharedMemoryManager
from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.errors import ErrorCode, ServerError, internal, invalid_arg, unavailable
from pbserve.server.grpc.server import TRANSPORTS, start_grpc_server
from pbserve.server.grpc.wire import SPLIT_MIN_BYTES
from pbserve.server.grpc.wire import varint_bytes as _varint
from shm.pool import RegionMap

TIMEOUT_S = 10.0


def to_bytes_layout(items: list[bytes]) -> bytes:
    return b"".join(len(x).to_bytes(4, "little") + x for x in items)


# --- the fake core ---------------------------------------------------------------------

class FakeCore(fakes.FakeCore):
    """Models: identity (IN_x -> OUT_x, any dtype), params (echoes the decoded request),
    model_error / model_invalid (error responses), sleepy (UNAVAILABLE), delay (sleeps
    DELAY_MS then echoes it), huge_param (a response parameter gRPC cannot carry), repeat (decoupled: N responses then a flag-only final),
    endless (decoupled: responds until cancelled)."""

    DECOUPLED = frozenset({"repeat", "endless"})
    MODELS = frozenset({"identity", "params", "model_error", "model_invalid", "sleepy",
                        "delay", "huge_param", *DECOUPLED})

    def __init__(self) -> None:
        super().__init__()
        self.endless_closed = threading.Event()
        self.endless_started = threading.Event()
        self.shared_memory = SharedMemoryManager(RegionMap(), lambda token: None)

    # metadata, repository
    def server_metadata(self) -> dict[str, Any]:
        return {"name": "triton", "version": "0.1.0", "extensions": ["model_repository"]}

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        self._check(name, version)
        return {"name": name, "versions": ["1"], "platform": "python",
                "inputs": [{"name": "IN_FP32", "datatype": "FP32", "shape": [-1, 4]}],
                "outputs": [{"name": "OUT_FP32", "datatype": "FP32", "shape": [-1, 4]}]}

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        self._check(name, version)
        return {"name": name, "backend": "python", "max_batch_size": 8,
                "input": [{"name": "IN_FP32", "data_type": "TYPE_FP32", "dims": [4]}],
                "output": [{"name": "OUT_FP32", "data_type": "TYPE_FP32", "dims": [4]}],
                "model_transaction_policy": {"decoupled": name in self.DECOUPLED},
                "parameters": {"k": {"string_value": "v"}}}

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        entries = super().repository_index(ready_only)
        if not ready_only:
            entries.append({"name": "never_loaded"})  # an entry with no state
        return entries

    def metrics_text(self) -> str:
        return ""

    # inference
    async def infer(self, request: InferRequest) -> InferResponse:
        self._check(request.model_name, request.model_version)
        name = request.model_name
        if name == "sleepy":
            raise unavailable("model 'sleepy' is not ready")
        if name in self.DECOUPLED:
            raise ServerError(ErrorCode.UNSUPPORTED, "decoupled")
        if name == "model_error":
            return self._response(request, [], internal(
                "Failed to process the request(s) for model 'model_error_0_0', message: "
                "ValueError: boom"))
        if name == "huge_param":  # an int beyond int64: no InferParameter can hold it
            return self._response(request, [], parameters={"huge": 2**64})
        if name == "model_invalid":
            return self._response(request, [], invalid_arg("model_invalid: no negatives"))
        if name == "delay":
            delay = int(np.frombuffer(request.inputs[0].data, np.int32)[0])
            await asyncio.sleep(delay / 1000)
            return self._response(request, [TensorData("OUT", "INT32", (1,),
                                                       bytearray(request.inputs[0].data))])
        if name == "params":
            seen = {"parameters": request.parameters, "correlation_id": request.correlation_id,
                    "flags": request.flags, "priority": request.priority,
                    "timeout_us": request.timeout_us, "id": request.id,
                    "version": request.model_version,
                    "types": {k: type(v).__name__ for k, v in request.parameters.items()}}
            return self._response(
                request, [TensorData("SEEN", "BYTES", (1,),
                                     to_bytes_layout([json.dumps(seen).encode()]))],
                parameters={"flag": True, "count": 3, "ratio": 0.5, "text": "hi"})
        return self._response(request, [
            TensorData("OUT" + t.name[2:], t.datatype, t.shape, bytearray(t.data))
            for t in request.inputs])

    async def stream_infer(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        self._check(request.model_name, request.model_version)
        if request.model_name == "endless":
            self.endless_started.set()
            try:
                i = 0
                while True:
                    yield self._response(request, [TensorData(
                        "OUT", "INT32", (1,), np.array([i], np.int32).tobytes())], final=False)
                    i += 1
                    await asyncio.sleep(0.01)
            finally:
                self.endless_closed.set()
        count = int(np.frombuffer(request.inputs[0].data, np.int32)[0])
        if count < 0:
            raise invalid_arg("repeat: N must be >= 0")
        for i in range(count):
            await asyncio.sleep(0.005)
            yield self._response(request, [TensorData("OUT", "INT32", (1,),
                                                      bytearray(np.array([i], np.int32)))],
                                 final=False)
        yield self._response(request, [], final=True)


# --- fixtures --------------------------------------------------------------------------

class ServerThread(fakes.ServerThread):
    """`linked`: the server reaches the core as a frontend process does
    (--frontend-processes, over shm)."""

    def __init__(self, transport: str, linked: bool = False) -> None:
        self.transport = transport
        core = FakeCore()
        self.linked = fakes.LinkedCore(core) if linked else None
        super().__init__(core)  # on uvloop
        self.url = f"127.0.0.1:{self.server.port}"

    async def start(self) -> None:
        served = self.linked.frontend() if self.linked is not None else self.core
        self.server = await start_grpc_server(served, "127.0.0.1", 0,
                                              transport=self.transport)

    async def close(self) -> None:
        await self.server.close(1.0)
        if self.linked is not None:
            self.linked.linked.close()

    def stop(self) -> None:
        super().stop()
        if self.linked is not None:
            self.linked.stop()


# Every test of this module runs on each gRPC transport (--grpc-transport), and on zttp
# in a frontend process's place (--frontend-processes needs zttp).
@pytest.fixture(scope="module", params=[*TRANSPORTS, "frontend-process"])
def server(request):
    linked = request.param == "frontend-process"
    running = ServerThread("zttp" if linked else request.param, linked=linked)
    yield running
    running.stop()


@pytest.fixture
def core(server) -> FakeCore:
    return server.core


@pytest.fixture
def client(server):
    client = grpcclient.InferenceServerClient(server.url)
    yield client
    client.close()
    assert_all_released(server.core)


@pytest.fixture
def stub(server):
    channel = grpc.insecure_channel(server.url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def expect_error(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


SAMPLES = {
    "BOOL": np.array([True, False, True]),
    "INT8": np.array([-128, 0, 127], np.int8),
    "INT16": np.array([-32768, 1, 32767], np.int16),
    "INT32": np.array([-(2**31), 2, 2**31 - 1], np.int32),
    "INT64": np.array([-(2**63), 3, 2**63 - 1], np.int64),
    "UINT8": np.array([0, 1, 255], np.uint8),
    "UINT16": np.array([0, 1, 65535], np.uint16),
    "UINT32": np.array([0, 1, 2**32 - 1], np.uint32),
    "UINT64": np.array([0, 1, 2**64 - 1], np.uint64),
    "FP16": np.array([-0.0, np.inf, 6.1e-5], np.float16),
    "FP32": np.array([-0.0, np.nan, 1e-45], np.float32),
    "FP64": np.array([-0.0, -np.inf, 5e-324], np.float64),
    "BYTES": np.array([b"", b"\xff\x00bin", "Grüße".encode()], np.object_),
}


# --- unary inference ---------------------------------------------------------------------

def test_every_dtype_round_trips_bit_exact_through_raw_contents(client, core):
    arrays = {k: v.reshape(1, 3) for k, v in SAMPLES.items()}
    result = client.infer("identity", [g_in("IN_" + k, v) for k, v in arrays.items()],
                          request_id="dtypes-1", client_timeout=TIMEOUT_S)
    assert core.expected == [("identity", "")]  # announced before the inputs were decoded
    for key, expected in arrays.items():
        actual = result.as_numpy("OUT_" + key)
        assert actual.shape == expected.shape, key
        if key == "BYTES":
            assert actual.tolist() == expected.tolist()
        else:
            assert actual.dtype == expected.dtype and actual.tobytes() == expected.tobytes()
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == (
        "identity", "1", "dtypes-1")
    # outputs are raw, in the order the model made them
    assert [o.name for o in response.outputs] == ["OUT_" + k for k in arrays]
    assert len(response.raw_output_contents) == len(arrays)


def test_large_inputs_are_split_off_the_message_and_round_trip(client, server):
    """Requests of SPLIT_MIN_BYTES and more have their raw contents read as slices of the
    received bytes (pbserve/server/grpc/wire.py): every field around them still counts, wherever it is."""
    placed_before = len(server.core.placer.placed)
    dropped_before = len(server.core.placer.dropped)
    big = np.arange(SPLIT_MIN_BYTES // 4 + 3, dtype=np.int32).reshape(1, -1)
    other = np.linspace(0, 1, 20000, dtype=np.float64).reshape(1, -1)
    small = np.array([[7, 8, 9]], np.uint8)
    result = client.infer("identity", [g_in("IN_big", big), g_in("IN_small", small),
                                       g_in("IN_other", other)],
                          request_id="split-1", client_timeout=TIMEOUT_S)
    for name, expected in (("big", big), ("small", small), ("other", other)):
        actual = result.as_numpy("OUT_" + name)
        assert actual.dtype == expected.dtype and actual.tobytes() == expected.tobytes()
    assert result.get_response().id == "split-1"
    # the raw contents first, the id between them and the inputs last: the same request
    request = pb.ModelInferRequest(model_name="identity", id="split-2")
    tensor = request.inputs.add(name="IN_big", datatype="INT32", shape=big.shape)
    raw = b"\x3a" + _varint(big.nbytes) + big.tobytes()
    body = raw + pb.ModelInferRequest(id="split-2").SerializeToString() \
        + pb.ModelInferRequest(model_name="identity", inputs=[tensor]).SerializeToString()
    channel = grpc.insecure_channel(server.url)
    try:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        reply = pb.ModelInferResponse.FromString(call(body, timeout=TIMEOUT_S))
    finally:
        channel.close()
    assert reply.id == "split-2" and reply.raw_output_contents[0] == big.tobytes()
    placer = server.core.placer
    # gathered field by field, each placed buffer given back (a frontend process places
    # into its own pool, not the core's placer)
    if server.transport == "zttp" and server.linked is None:
        assert (len(placer.placed) - placed_before, len(placer.dropped) - dropped_before) == (4, 4)
    assert [(o.name, o.datatype, list(o.shape)) for o in reply.outputs] == [
        ("OUT_big", "INT32", list(big.shape))]


@pytest.mark.parametrize("body", [b"\xff\xff", b"\x3a\x05ab",
                                  b"\x3a" + b"\xff\xff\x07" + bytes(SPLIT_MIN_BYTES)],
                         ids=["garbage", "truncated", "large-truncated"])
def test_unparsable_infer_request_is_invalid_argument_naming_the_message(server, body):
    channel = grpc.insecure_channel(server.url)
    try:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as info:
            call(body, timeout=TIMEOUT_S)
    finally:
        channel.close()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith(
        "failed to parse the inference.ModelInferRequest message")


def test_requested_outputs_reach_the_core(client):
    outputs = [grpcclient.InferRequestedOutput("OUT_B")]
    result = client.infer("identity", [g_in("IN_A", SAMPLES["INT8"]),
                                       g_in("IN_B", SAMPLES["FP32"])], outputs=outputs)
    assert [o.name for o in result.get_response().outputs] == ["OUT_B"]


def test_typed_contents_become_triton_raw_layout(stub, core):
    tensor = pb.ModelInferRequest.InferInputTensor
    request = pb.ModelInferRequest(model_name="identity", inputs=[
        tensor(name="IN_bool", datatype="BOOL", shape=[2],
               contents=pb.InferTensorContents(bool_contents=[True, False])),
        tensor(name="IN_i8", datatype="INT8", shape=[2],
               contents=pb.InferTensorContents(int_contents=[-1, 300])),
        tensor(name="IN_i16", datatype="INT16", shape=[1],
               contents=pb.InferTensorContents(int_contents=[-2])),
        tensor(name="IN_i32", datatype="INT32", shape=[1],
               contents=pb.InferTensorContents(int_contents=[7])),
        tensor(name="IN_i64", datatype="INT64", shape=[1],
               contents=pb.InferTensorContents(int64_contents=[-(2**40)])),
        tensor(name="IN_u8", datatype="UINT8", shape=[1],
               contents=pb.InferTensorContents(uint_contents=[255])),
        tensor(name="IN_u16", datatype="UINT16", shape=[1],
               contents=pb.InferTensorContents(uint_contents=[65535])),
        tensor(name="IN_u32", datatype="UINT32", shape=[1],
               contents=pb.InferTensorContents(uint_contents=[2**32 - 1])),
        tensor(name="IN_u64", datatype="UINT64", shape=[1],
               contents=pb.InferTensorContents(uint64_contents=[2**64 - 1])),
        tensor(name="IN_f32", datatype="FP32", shape=[1],
               contents=pb.InferTensorContents(fp32_contents=[1.5])),
        tensor(name="IN_f64", datatype="FP64", shape=[1],
               contents=pb.InferTensorContents(fp64_contents=[-2.25])),
        tensor(name="IN_s", datatype="BYTES", shape=[2],
               contents=pb.InferTensorContents(bytes_contents=[b"ab", b""])),
        tensor(name="IN_empty", datatype="FP32", shape=[0], contents=pb.InferTensorContents()),
    ])
    response = stub.ModelInfer(request, timeout=TIMEOUT_S)
    raw = dict(zip([o.name for o in response.outputs], response.raw_output_contents))
    assert raw == {
        "OUT_bool": b"\x01\x00", "OUT_i8": bytes([0xff, 300 & 0xff]),
        "OUT_i16": np.array([-2], "<i2").tobytes(), "OUT_i32": np.array([7], "<i4").tobytes(),
        "OUT_i64": np.array([-(2**40)], "<i8").tobytes(), "OUT_u8": b"\xff",
        "OUT_u16": b"\xff\xff", "OUT_u32": b"\xff" * 4, "OUT_u64": b"\xff" * 8,
        "OUT_f32": np.array([1.5], "<f4").tobytes(), "OUT_f64": np.array([-2.25], "<f8").tobytes(),
        "OUT_s": to_bytes_layout([b"ab", b""]), "OUT_empty": b""}


@pytest.mark.parametrize("inputs, raw, needle", [
    ([("IN_A", "INT8", pb.InferTensorContents(fp32_contents=[1.0]))], [],
     "of type 'FP32', expected datatype 'INT8'"),
    ([("IN_A", "FP32", pb.InferTensorContents(fp32_contents=[1.0]))], [b"1234"],
     "contents field must not be specified when using raw_input_contents"),
    ([("IN_A", "FP32", None)], [], "unable to find data for input tensor 'IN_A'"),
    ([("IN_A", "INT32", pb.InferTensorContents(int_contents=[1], int64_contents=[2]))], [],
     "binary data was already supplied"),
])
def test_bad_input_data_is_invalid_argument(stub, inputs, raw, needle):
    tensors = [pb.ModelInferRequest.InferInputTensor(name=n, datatype=d, shape=[1],
                                                     contents=c) for n, d, c in inputs]
    request = pb.ModelInferRequest(model_name="identity", inputs=tensors,
                                   raw_input_contents=raw)
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request, timeout=TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.details()


def test_request_parameters_map_to_request_fields_and_typed_parameters(client):
    result = client.infer("params", [g_in("IN_A", SAMPLES["INT8"])], request_id="p-1",
                          sequence_id=42, sequence_start=True, sequence_end=True, priority=2,
                          timeout=1500, model_version="1",
                          parameters={"s": "text", "i": -5, "b": False, "f": 0.25})
    seen = json.loads(result.as_numpy("SEEN")[0])
    assert seen["parameters"] == {"s": "text", "i": -5, "b": False, "f": 0.25}
    assert seen["types"] == {"s": "str", "i": "int", "b": "bool", "f": "float"}
    assert (seen["correlation_id"], seen["flags"], seen["priority"], seen["timeout_us"]) == (
        42, 3, 2, 1500)
    assert (seen["id"], seen["version"]) == ("p-1", "1")
    result = client.infer("params", [g_in("IN_A", SAMPLES["INT8"])], sequence_id="corr-a",
                          sequence_end=True)
    seen = json.loads(result.as_numpy("SEEN")[0])
    assert (seen["correlation_id"], seen["flags"]) == ("corr-a", 2)
    # response parameters come back typed
    params = result.get_response().parameters
    assert params["flag"].bool_param is True and params["count"].int64_param == 3
    assert params["ratio"].double_param == 0.5 and params["text"].string_param == "hi"


def test_reserved_and_badly_typed_parameters_are_invalid_argument(stub):
    for key, param in [("triton_other", pb.InferParameter(bool_param=True)),
                       ("sequence_start", pb.InferParameter(int64_param=1)),
                       ("priority", pb.InferParameter(int64_param=-1)),
                       ("custom", pb.InferParameter(uint64_param=1))]:
        request = pb.ModelInferRequest(model_name="params", parameters={key: param})
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request, timeout=TIMEOUT_S)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, key


@pytest.mark.parametrize("model, status, needle", [
    ("no_such_model", "StatusCode.NOT_FOUND", "no_such_model"),
    ("model_error", "StatusCode.INTERNAL", "ValueError: boom"),
    ("model_invalid", "StatusCode.INVALID_ARGUMENT", "model_invalid: no negatives"),
    ("sleepy", "StatusCode.UNAVAILABLE", "'sleepy' is not ready"),
    ("repeat", "StatusCode.UNIMPLEMENTED", "doesn't support models with decoupled"),
])
def test_errors_carry_the_status_of_their_code_and_the_message(client, model, status, needle):
    err = expect_error(lambda: client.infer(model, [g_in("IN_A", SAMPLES["INT32"])],
                                            client_timeout=TIMEOUT_S))
    assert err.status() == status and needle in err.message()
    # the server still serves
    assert client.infer("identity", [g_in("IN_A", SAMPLES["INT32"])]).as_numpy("OUT_A") \
        is not None


def test_bad_model_version_is_invalid_argument(client):
    err = expect_error(lambda: client.infer("identity", [g_in("IN_A", SAMPLES["INT32"])],
                                            model_version="latest"))
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "latest" in err.message()


# --- health, metadata, config, repository ------------------------------------------------

def test_health_metadata_and_config(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("identity") and not client.is_model_ready("sleepy")
    assert not client.is_model_ready("no_such_model")
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "triton" and meta["extensions"] == ["model_repository"]
    meta = client.get_model_metadata("identity", as_json=True)
    assert meta["platform"] == "python" and meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "IN_FP32", "datatype": "FP32", "shape": ["-1", "4"]}]
    config = client.get_model_config("repeat", as_json=True)["config"]
    assert config["name"] == "repeat" and int(config["max_batch_size"]) == 8
    assert config["output"][0]["data_type"] == "TYPE_FP32"
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert config["parameters"] == {"k": {"string_value": "v"}}
    err = expect_error(lambda: client.get_model_metadata("no_such_model"))
    assert err.status() == "StatusCode.NOT_FOUND"
    err = expect_error(lambda: client.get_model_config("identity", model_version="2"))
    assert err.status() == "StatusCode.NOT_FOUND"


def test_repository_index_load_and_unload(client, core):
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {"name": "identity", "version": "1", "state": "READY"} in index
    assert {"name": "never_loaded"} in index
    client.unload_model("delay", unload_dependents=True)
    assert core.unloads[-1] == ("delay", True)
    assert not client.is_model_ready("delay")
    ready = client.get_model_repository_index(as_json=True)
    assert "delay" in [m["name"] for m in ready["models"]]
    client.load_model("delay", config='{"max_batch_size": 2}',
                      files={"file:1/model.py": b"print(1)"})
    assert core.loads[-1] == ("delay", '{"max_batch_size": 2}', {"file:1/model.py": b"print(1)"})
    assert client.is_model_ready("delay")
    err = expect_error(lambda: client.load_model("broken"))
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "SyntaxError" in err.message()


def test_statistics_and_shared_memory_answers(client):
    stats = client.get_inference_statistics("identity", as_json=True)
    assert stats["model_stats"][0]["name"] == "identity"
    assert client.get_system_shared_memory_status(as_json=True) == {}
    client.unregister_system_shared_memory()
    err = expect_error(lambda: client.register_system_shared_memory("r", "/pbserve_no_such_key", 64))
    assert err.status() == "StatusCode.INTERNAL"
    assert err.message() == "Unable to open shared memory region: '/pbserve_no_such_key'"
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    err = expect_error(lambda: client.register_cuda_shared_memory("c", b"\0" * 64, 0, 64))
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert err.message() == "failed to register CUDA shared memory region: 'c', GPUs not supported"


# --- streaming -------------------------------------------------------------------------

class Stream:
    def __init__(self, server: ServerThread) -> None:
        self.client = grpcclient.InferenceServerClient(server.url)
        self.events: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.events.put((result, error)))

    def send(self, model: str, inputs: list, request_id: str, **kwargs) -> None:
        self.client.async_stream_infer(model, inputs, request_id=request_id, **kwargs)

    def next(self, timeout: float = TIMEOUT_S):
        return self.events.get(timeout=timeout)

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def is_final(result) -> bool:
    params = result.get_response().parameters
    assert "triton_final_response" in params
    return params["triton_final_response"].bool_param


def test_stream_interleaves_two_decoupled_requests_with_empty_final_responses(server, core):
    stream = Stream(server)
    stream.send("repeat", [g_in("N", np.array([4], np.int32))], "four",
                enable_empty_final_response=True)
    stream.send("repeat", [g_in("N", np.array([3], np.int32))], "three",
                enable_empty_final_response=True)
    got: dict[str, list] = {"four": [], "three": []}
    order = []
    while not all(rs and is_final(rs[-1]) for rs in got.values()):
        result, error = stream.next()
        assert error is None
        rid = result.get_response().id
        got[rid].append(result)
        order.append(rid)
    stream.close()
    assert order.index("three") < order.index("four", order.index("four") + 1) or \
        order.index("four") < order.index("three", order.index("three") + 1)  # interleaved
    for rid, count in (("four", 4), ("three", 3)):
        results = got[rid]
        assert [int(r.as_numpy("OUT")[0]) for r in results[:-1]] == list(range(count))
        assert [is_final(r) for r in results] == [False] * count + [True]
        last = results[-1].get_response()
        assert last.model_name == "repeat" and not last.outputs and last.id == rid
    assert_all_released(core)


def test_stream_sends_no_empty_final_response_unless_asked(server, core):
    stream = Stream(server)
    stream.send("repeat", [g_in("N", np.array([2], np.int32))], "plain")
    stream.send("repeat", [g_in("N", np.array([0], np.int32))], "zero")
    stream.send("identity", [g_in("IN_A", SAMPLES["INT32"])], "marker")
    results = [stream.next() for _ in range(3)]
    stream.close()  # half-close: the call ends once everything in flight is done
    assert all(error is None for _, error in results)
    ids = sorted(r.get_response().id for r, _ in results)
    assert ids == ["marker", "plain", "plain"]
    for result, _ in results:  # every response says whether it is its request's last
        assert is_final(result) == (result.get_response().id == "marker")
    assert stream.events.empty()
    assert_all_released(core)


def test_stream_errors_arrive_in_band_and_the_stream_stays_open(server, core):
    stream = Stream(server)
    stream.send("no_such_model", [g_in("IN_A", SAMPLES["INT32"])], "bad")
    stream.send("model_invalid", [g_in("IN_A", SAMPLES["INT32"])], "bad-too")
    stream.send("repeat", [g_in("N", np.array([-1], np.int32))], "bad-n")
    stream.send("identity", [g_in("IN_A", SAMPLES["INT32"])], "good")
    events = [stream.next() for _ in range(4)]
    stream.close()
    errors = sorted(error.message() for _, error in events if error is not None)
    assert len(errors) == 3
    assert any("no_such_model" in e for e in errors)
    assert any("model_invalid: no negatives" in e for e in errors)
    assert any("N must be >= 0" in e for e in errors)
    good = [result for result, error in events if error is None]
    assert good[0].as_numpy("OUT_A").tolist() == SAMPLES["INT32"].tolist()
    assert_all_released(core)


def test_stream_keeps_arrival_order_for_non_decoupled_models(server, core):
    stream = Stream(server)
    for rid, delay in (("slow", 150), ("fast", 0), ("mid", 30)):
        stream.send("delay", [g_in("DELAY_MS", np.array([delay], np.int32))], rid)
    ids = [stream.next()[0].get_response().id for _ in range(3)]
    stream.close()
    assert ids == ["slow", "fast", "mid"]
    assert_all_released(core)


def test_stream_answers_a_request_whose_response_cannot_be_encoded(server, core):
    stream = Stream(server)
    stream.send("huge_param", [g_in("IN_A", SAMPLES["INT32"])], "huge")
    stream.send("identity", [g_in("IN_A", SAMPLES["INT32"])], "after")
    first, second = stream.next(), stream.next()
    stream.close()
    assert first[1] is not None and "out of range" in first[1].message()
    assert second[1] is None and second[0].get_response().id == "after"
    assert_all_released(core)


def test_cancelled_stream_cancels_its_requests_cleanly(server, core, caplog):
    caplog.set_level(logging.WARNING)
    core.endless_closed.clear()
    stream = Stream(server)
    stream.send("endless", [g_in("N", np.array([0], np.int32))], "forever")
    result, error = stream.next()
    assert error is None and int(result.as_numpy("OUT")[0]) == 0
    stream.close(cancel=True)
    assert core.endless_closed.wait(5), "the request's response iterator was not closed"
    assert_all_released(core)
    time.sleep(0.05)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    # the server goes on serving
    with grpcclient.InferenceServerClient(server.url) as client:
        assert client.is_server_live()


# --- the aio client, against a server on the test's own (asyncio) loop ---------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_aio_client_unary_and_stream(transport):
    core = FakeCore()
    server = await start_grpc_server(core, "127.0.0.1", 0, transport=transport)
    try:
        async with aioclient.InferenceServerClient(f"127.0.0.1:{server.port}") as client:
            assert await client.is_server_live()
            a = np.arange(8, dtype=np.float32).reshape(2, 4)
            result = await client.infer("identity", [g_in("IN_A", a)], request_id="aio")
            assert np.array_equal(result.as_numpy("OUT_A"), a)

            async def requests():
                for n in (2, 1):
                    yield {"model_name": "repeat", "inputs": [g_in("N", np.array([n], np.int32))],
                           "request_id": f"n{n}"}

            # The aio client cannot ask for empty final responses: the call ends when the
            # client has half-closed and both requests are done.
            got: dict[str, list[bool]] = {"n2": [], "n1": []}
            async for result, error in client.stream_infer(requests()):
                assert error is None
                got[result.get_response().id].append(is_final(result))
            assert got == {"n2": [False, False], "n1": [False]}
    finally:
        await server.close(1.0)
    assert core.released == core.made
