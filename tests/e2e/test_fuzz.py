"""A bounded fuzz of the HTTP and gRPC decoders of a real pbserve (hypothesis): every
request gets a 4xx (INVALID_ARGUMENT, NOT_FOUND, ...) or a valid answer, never a 5xx,
UNKNOWN or INTERNAL, and the server serves on and logs no traceback.

Seconds by default (a fixed, derandomized set of examples); longer on demand:
    HYPOTHESIS_PROFILE=long python -m pytest tests/e2e/test_fuzz.py
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import grpc
import httptools
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from client_inputs import http_input
from pbserve.testing import running_server

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"
SERVICE = "/inference.GRPCInferenceService/"

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          database=None, suppress_health_check=list(HealthCheck))
settings.register_profile("long", max_examples=3000, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck))
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# 501: an encoding or extension pbserve does not support, as Triton answers it.
HTTP_OK = set(range(100, 500)) | {501}
GRPC_OK = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.UNIMPLEMENTED}
TIMEOUT_S = "0.5"  # header and body timeouts: an unfinished request is answered 408 soon


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("fuzz") / "server.log"
    with running_server(EXAMPLES, log_path=log, args=[
            "--model-control-mode", "explicit", "--load-model", "identity",
            "--load-model", "add_sub", "--http-header-timeout-secs", TIMEOUT_S,
            "--http-body-timeout-secs", TIMEOUT_S, "--http-max-input-size",
            str(1 << 20)]) as srv:
        yield srv
        serves_cleanly(srv)


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield channel


def serves_cleanly(server) -> None:
    a = np.arange(16, dtype=np.float32)
    result = server.http_client().infer("add_sub", [http_input("INPUT0", a),
                                                    http_input("INPUT1", a)])
    assert (result.as_numpy("OUTPUT0") == a + a).all()
    assert "Traceback" not in server.log_text()


# --- HTTP ----------------------------------------------------------------------------------

class _Reply:
    """The status of the first reply on a connection (httptools callbacks)."""

    def __init__(self) -> None:
        self.done = False

    def on_message_complete(self) -> None:
        self.done = True


def http_status(server, request: bytes) -> int:
    """Send raw bytes; the status of the reply (a reply must come, and come whole)."""
    reply = _Reply()
    parser = httptools.HttpResponseParser(reply)
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before all was sent: the answer is still there
        while not reply.done:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed without a (whole) reply to {request[:300]!r}"
            parser.feed_data(chunk)
            if parser.get_status_code() == 100 and reply.done:  # 100 Continue: one more
                reply.done = False
    event(f"HTTP {parser.get_status_code()}")  # --hypothesis-show-statistics shows them
    return parser.get_status_code()


PATHS = st.sampled_from([
    b"/v2/models/identity/infer", b"/v2/models/add_sub/infer", b"/v2/models/nope/infer",
    b"/v2/models/identity/versions/1/infer", b"/v2/models/add_sub/generate",
    b"/v2/models/identity/generate_stream", b"/v2/repository/index", b"/v2",
    b"/v2/models/add_sub/config", b"/v2/models/stats", b"/v2/health/ready",
    b"/v2/repository/models/nope/unload"]) | st.binary(min_size=1, max_size=40).map(
        lambda b: b"/" + b.replace(b" ", b"").replace(b"\r", b"").replace(b"\n", b""))
METHODS = st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE"])
HEADER_NAMES = st.sampled_from([
    b"Content-Length", b"Transfer-Encoding", b"Content-Encoding", b"Accept-Encoding",
    b"Inference-Header-Content-Length", b"Expect", b"Connection"]) | st.binary(
        min_size=1, max_size=20)
HEADER_VALUES = st.sampled_from([
    b"chunked", b"gzip", b"deflate", b"identity", b"100-continue", b"close", b"0", b"7",
    b"-1", b"99999999999999999999"]) | st.binary(max_size=30)


@PROFILE
@given(method=METHODS, path=PATHS, headers=st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES),
                                                    max_size=4),
       body=st.binary(max_size=300))
def test_http_heads_and_bodies_of_random_bytes(server, method, path, headers, body):
    head = b"%s %s HTTP/1.1\r\nHost: x\r\n" % (method, path)
    head += b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers)
    if not any(name.lower() in (b"content-length", b"transfer-encoding")
               for name, _ in headers):
        head += b"Content-Length: %d\r\n" % len(body)
    assert http_status(server, head + b"\r\n" + body) in HTTP_OK


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
DATATYPES = st.sampled_from(["BOOL", "INT8", "INT32", "INT64", "UINT8", "UINT64", "FP16",
                             "FP32", "FP64", "BYTES", "BF16"])
INPUT_NAMES = st.sampled_from(["INPUT_INT32", "INPUT_FP32", "INPUT_STRING", "INPUT_BOOL",
                               "INPUT_UINT64", "INPUT_FP16", "INPUT0", "INPUT1", "X"])
SHAPES = st.lists(st.integers(-2, 6) | st.sampled_from([2**31, 2**63 - 1]), max_size=3)
DATA = st.lists(st.integers(-300, 300) | st.floats(-1e3, 1e3) | st.text(max_size=4)
                | st.booleans(), max_size=40) | st.recursive(
    st.lists(st.integers(0, 3), max_size=3), lambda inner: st.lists(inner, max_size=3))
PARAMETERS = st.dictionaries(
    st.sampled_from(["binary_data_size", "binary_data", "shared_memory_region",
                     "classification", "sequence_id", "priority", "timeout",
                     "binary_data_output", "triton_x", "any"]), JSON | st.integers(0, 64),
    max_size=3)
TENSOR = st.fixed_dictionaries(
    {"name": INPUT_NAMES | st.text(max_size=6)},
    optional={"datatype": DATATYPES | JSON, "shape": SHAPES | JSON, "data": DATA | JSON,
              "parameters": PARAMETERS | JSON})
INFER = st.fixed_dictionaries(
    {"inputs": st.lists(TENSOR, max_size=3) | JSON},
    optional={"outputs": st.lists(st.fixed_dictionaries(
                  {"name": INPUT_NAMES.map(lambda n: n.replace("INPUT", "OUTPUT"))},
                  optional={"parameters": PARAMETERS}), max_size=2) | JSON,
              "parameters": PARAMETERS | JSON, "id": st.text(max_size=5) | JSON})


@PROFILE
@given(model=st.sampled_from(["identity", "add_sub", "nope"]), request=INFER,
       binary=st.none() | st.binary(max_size=200))
def test_http_infer_requests_of_random_structure(server, model, request, binary):
    header = json.dumps(request).encode()
    extra = b""
    if binary is not None:  # the binary tensor extension: JSON, then raw bytes
        extra = b"Inference-Header-Content-Length: %d\r\n" % len(header)
        header += binary
    raw = (b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n"
           % (model.encode(), len(header), extra)) + header
    assert http_status(server, raw) in HTTP_OK


@PROFILE
@given(model=st.sampled_from(["identity", "add_sub"]), request=st.dictionaries(
    st.sampled_from(["INPUT_INT32", "INPUT_STRING", "INPUT0", "id", "parameters", "x"]),
    JSON, max_size=4), streaming=st.booleans())
def test_http_generate_requests_of_random_structure(server, model, request, streaming):
    body = json.dumps(request).encode()
    kind = b"generate_stream" if streaming else b"generate"
    raw = (b"POST /v2/models/%s/%s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
           % (model.encode(), kind, len(body))) + body
    assert http_status(server, raw) in HTTP_OK


# --- gRPC ----------------------------------------------------------------------------------

def grpc_code(channel, method: str, payload: bytes) -> grpc.StatusCode:
    call = channel.unary_unary(SERVICE + method)
    try:
        call(payload, timeout=10)
    except grpc.RpcError as exc:
        code = exc.code()
    else:
        code = grpc.StatusCode.OK
    event(code.name)
    return code


PARAMETER = st.one_of(
    st.builds(lambda v: pb.InferParameter(bool_param=v), st.booleans()),
    st.builds(lambda v: pb.InferParameter(int64_param=v), st.integers(-2**63, 2**63 - 1)),
    st.builds(lambda v: pb.InferParameter(uint64_param=v), st.integers(0, 2**64 - 1)),
    st.builds(lambda v: pb.InferParameter(string_param=v), st.text(max_size=6)),
    st.builds(lambda v: pb.InferParameter(double_param=v), st.floats()),
    st.just(pb.InferParameter()))
PARAMETER_MAPS = st.dictionaries(st.sampled_from([
    "sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "triton_x",
    "triton_enable_empty_final_response", "shared_memory_region", "classification",
    "any"]), PARAMETER, max_size=3)
CONTENTS = st.one_of(
    st.builds(lambda v: pb.InferTensorContents(int_contents=v),
              st.lists(st.integers(-2**31, 2**31 - 1), max_size=20)),
    st.builds(lambda v: pb.InferTensorContents(fp32_contents=v),
              st.lists(st.floats(width=32), max_size=20)),
    st.builds(lambda v: pb.InferTensorContents(bytes_contents=v),
              st.lists(st.binary(max_size=8), max_size=8)),
    st.builds(lambda v, w: pb.InferTensorContents(bool_contents=v, uint64_contents=w),
              st.lists(st.booleans(), max_size=5), st.lists(st.integers(0, 2**64 - 1),
                                                             max_size=5)))
GRPC_INPUT = st.builds(
    lambda name, datatype, shape, contents, params: pb.ModelInferRequest.InferInputTensor(
        name=name, datatype=datatype, shape=shape, contents=contents, parameters=params),
    INPUT_NAMES | st.text(max_size=5), DATATYPES | st.text(max_size=5),
    st.lists(st.integers(-2, 6) | st.sampled_from([2**40, 2**63 - 1, -2**63]), max_size=3),
    st.none() | CONTENTS, PARAMETER_MAPS)
GRPC_REQUEST = st.builds(
    lambda model, version, inputs, raw, outputs, params, rid: pb.ModelInferRequest(
        model_name=model, model_version=version, inputs=inputs, raw_input_contents=raw,
        outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name=o) for o in outputs],
        parameters=params, id=rid),
    st.sampled_from(["identity", "add_sub", "nope", ""]),
    st.sampled_from(["", "1", "2", "-1", "x", "99999999999999999999"]),
    st.lists(GRPC_INPUT, max_size=3), st.lists(st.binary(max_size=80), max_size=3),
    st.lists(st.sampled_from(["OUTPUT_INT32", "OUTPUT0", "Y"]), max_size=2),
    PARAMETER_MAPS, st.text(max_size=4))


@PROFILE
@given(request=GRPC_REQUEST)
def test_grpc_infer_requests_of_random_structure(channel, request):
    assert grpc_code(channel, "ModelInfer", request.SerializeToString()) in GRPC_OK


@PROFILE
@given(request=GRPC_REQUEST, cut=st.integers(0, 400), flips=st.lists(
    st.tuples(st.integers(0, 400), st.integers(1, 255)), max_size=3))
def test_grpc_infer_messages_truncated_or_corrupted(channel, request, cut, flips):
    data = bytearray(request.SerializeToString())
    del data[cut:]
    for index, mask in flips:
        if index < len(data):
            data[index] ^= mask
    assert grpc_code(channel, "ModelInfer", bytes(data)) in GRPC_OK


@PROFILE
@given(method=st.sampled_from(["ModelInfer", "ModelMetadata", "ModelConfig", "ModelReady",
                               "RepositoryIndex", "RepositoryModelUnload", "ServerMetadata",
                               "ModelStatistics"]), payload=st.binary(max_size=200))
def test_grpc_messages_of_random_bytes(channel, method, payload):
    assert grpc_code(channel, method, payload) in GRPC_OK


@PROFILE
@given(frames=st.lists(GRPC_REQUEST.map(lambda r: r.SerializeToString())
                       | st.binary(min_size=1, max_size=60), min_size=1, max_size=4))
def test_grpc_streams_of_random_frames(channel, frames):
    call = channel.stream_stream(SERVICE + "ModelStreamInfer")
    try:
        for _ in call(iter(frames), timeout=10):
            pass
    except grpc.RpcError as exc:
        code = exc.code()
    else:
        code = grpc.StatusCode.OK
    undecodable = False
    for frame in frames:
        try:
            pb.ModelInferRequest.FromString(frame)
        except Exception:  # noqa: BLE001 - what the server cannot decode either
            undecodable = True
    assert code == (grpc.StatusCode.INVALID_ARGUMENT if undecodable else grpc.StatusCode.OK)
