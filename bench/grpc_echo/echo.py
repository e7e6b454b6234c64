"""What every echo answers: the RPCs perf_analyzer and tritonclient call, as bytes.

The messages are Triton's own (`tritonclient.grpc.service_pb2`, `model_config_pb2`), so
the wire is the truth. ModelInfer parses the request (upb) and answers INPUT0's raw bytes
as OUTPUT0: the same protobuf work for every transport, no model behind it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

SERVICE = "inference.GRPCInferenceService"
PREFIX = f"/{SERVICE}/"
STREAM_METHOD = f"{PREFIX}ModelStreamInfer"
MODEL = "identity_fp32"
# The anchor model's config (../shared/perf/anchor_models), as Triton reads it.
_CONFIG = """
name: "identity_fp32"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def _model_config() -> mc.ModelConfig:
    config = text_format.Parse(_CONFIG, mc.ModelConfig())
    config.version_policy.latest.num_versions = 1  # as Triton fills it in
    return config


_served = [0]  # inferences answered (approximate under threads: only its growth matters)


def _statistics(_body: bytes) -> bytes:
    """Triton's shape, with counts and no times: perf_analyzer picks the model version
    whose queue count grew during its window, and fails when none did."""
    n = _served[0]
    stats = pb.ModelStatistics(name=MODEL, version="1", inference_count=n, execution_count=n)
    for field in ("success", "fail", "queue", "compute_input", "compute_infer",
                  "compute_output", "cache_hit", "cache_miss"):
        getattr(stats.inference_stats, field).SetInParent()
    for field in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        getattr(stats.inference_stats, field).count = n
    return pb.ModelStatisticsResponse(model_stats=[stats]).SerializeToString()


def _constant_answers() -> dict[str, bytes]:
    tensor = [pb.ModelMetadataResponse.TensorMetadata(name="INPUT0", datatype="FP32",
                                                      shape=[-1])]
    out = [pb.ModelMetadataResponse.TensorMetadata(name="OUTPUT0", datatype="FP32",
                                                   shape=[-1])]
    answers = {
        "ServerLive": pb.ServerLiveResponse(live=True),
        "ServerReady": pb.ServerReadyResponse(ready=True),
        "ModelReady": pb.ModelReadyResponse(ready=True),
        "ServerMetadata": pb.ServerMetadataResponse(
            name="echo", version="2.51.0", extensions=["statistics"]),
        "ModelMetadata": pb.ModelMetadataResponse(
            name=MODEL, versions=["1"], platform="python", inputs=tensor, outputs=out),
        "ModelConfig": pb.ModelConfigResponse(config=_model_config()),
    }
    return {name: msg.SerializeToString() for name, msg in answers.items()}


_CONSTANT = _constant_answers()


# Feature probes (features.py): a request for model "wait" is never answered (the call
# waits for its cancellation and records it), one for model "error" fails with a status.
WAIT_MODEL, ERROR_MODEL = "wait", "error"
ERROR_STATUS, ERROR_MESSAGE = 3, "bad input: 100% wrong, ünïcode kept"


class Wait(Exception):
    """The call must wait until the client cancels it."""


class Refused(Exception):
    """The call ends with a gRPC status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def trailers(self) -> list[tuple[bytes, bytes]]:
        """grpc-status and the percent-encoded grpc-message, as the spec writes them."""
        message = "".join(c if " " <= c <= "~" and c != "%" else
                          "".join(f"%{b:02X}" for b in c.encode()) for c in self.message)
        status = [(b"grpc-status", str(self.status).encode())]
        return status + [(b"grpc-message", message.encode())] if message else status


def record(event: str) -> None:
    """Append an event (a cancellation seen) to $ECHO_EVENTS, when set."""
    path = os.environ.get("ECHO_EVENTS")
    if path:
        with open(path, "a") as f:
            f.write(event + "\n")


def infer_response(request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    """INPUT0 back as OUTPUT0 (raw bytes, same shape)."""
    if request.model_name == WAIT_MODEL:
        raise Wait()
    if request.model_name == ERROR_MODEL:
        raise Refused(ERROR_STATUS, ERROR_MESSAGE)
    _served[0] += 1
    response = pb.ModelInferResponse(model_name=request.model_name, model_version="1",
                                     id=request.id)
    out = response.outputs.add()
    out.name = "OUTPUT0"
    out.datatype = "FP32"
    out.shape.extend(request.inputs[0].shape)
    response.raw_output_contents.append(request.raw_input_contents[0])
    return response


def model_infer(body: bytes) -> bytes:
    """The ModelInfer answer to a serialized ModelInferRequest."""
    return infer_response(pb.ModelInferRequest.FromString(body)).SerializeToString()


def stream_infer(body: bytes) -> bytes:
    """One ModelStreamInferResponse for one ModelInferRequest on ModelStreamInfer."""
    response = infer_response(pb.ModelInferRequest.FromString(body))
    return pb.ModelStreamInferResponse(infer_response=response).SerializeToString()


def unary_handler(method: str) -> Callable[[bytes], bytes] | None:
    """The unary RPC `method` ("ModelInfer", ...) as bytes -> bytes, or None."""
    if method == "ModelInfer":
        return model_infer
    if method == "ModelStatistics":
        return _statistics
    answer = _CONSTANT.get(method)
    if answer is None:
        return None
    return lambda _body: answer


def handler_for_path(path: str) -> Callable[[bytes], bytes] | None:
    """The unary handler of an HTTP/2 :path ("/inference.GRPCInferenceService/X")."""
    if not path.startswith(PREFIX):
        return None
    return unary_handler(path[len(PREFIX):])


def answer_unary(path: str, requests: list[bytes]) -> bytes:
    """A unary call's answer from the request messages its stream carried; Refused
    (UNIMPLEMENTED) for an unknown method or other than one message, Wait for the
    cancellation probe."""
    fn = handler_for_path(path)
    if fn is None or len(requests) != 1:
        raise Refused(12, "")
    return fn(requests[0])


def take(call: Any, data: bytes, send: Callable[[bytes], None]) -> None:
    """A call's DATA (for the zttp server): each whole message of a
    stream is answered at once through `send` (the cancellation probe gets no answer:
    `call.waiting`), a unary call's messages are kept in `call.requests` for its end."""
    messages = call.deframer.feed(data)
    if not call.streaming:
        call.requests.extend(messages)
        return
    for body in messages:
        try:
            send(stream_infer(body))
        except Wait:
            call.waiting = True


UNARY_METHODS = ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata",
                 "ModelMetadata", "ModelConfig", "ModelStatistics", "ModelInfer")
