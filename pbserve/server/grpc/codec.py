"""KServe v2 gRPC messages <-> the core's InferRequest / InferResponse.

Inputs come from `raw_input_contents` (handed over as the bytes protobuf gives us,
no further copy) or from the typed `contents` fields, which are turned into the same
raw little-endian layout Triton builds (BYTES: a 4-byte length before each item).
Outputs always go back as `raw_output_contents`. Request parameters follow Triton's
SetInferenceRequestMetadata: `sequence_id`, `sequence_start`, `sequence_end`,
`priority` and `timeout` become request fields, `triton_enable_empty_final_response`
is the only `triton_` key allowed (a stream option), every other key is passed on
with its Python type. An input or output whose parameters name a client's shared-memory
region (grpc/shm.py) carries no data here: the stub reads it there or writes it there.
An output whose parameters ask for `classification` (an int64_param > 0, as Triton) is
classified once the model answered (server/classification.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb

from pbserve.core.types import (
    FLAG_SEQUENCE_END,
    FLAG_SEQUENCE_START,
    InferRequest,
    InferResponse,
    TensorData,
)
from pbserve.errors import ErrorCode, ServerError, invalid_arg
from pbserve.server.buffers import byte_view
from pbserve.server.classification import UINT32
from pbserve.server.grpc.shm import tensor_shm
from pbserve.server.grpc.wire import infer_response_parts

__all__ = ["EMPTY_FINAL_KEY", "FINAL_KEY", "RequestOptions", "decode_infer_request",
           "encode_infer_response", "encode_infer_response_bytes", "model_version",
           "status_code", "status_message"]

FINAL_KEY = "triton_final_response"
EMPTY_FINAL_KEY = "triton_enable_empty_final_response"
_UINT64 = (1 << 64) - 1

InputTensor = pb.ModelInferRequest.InferInputTensor


class RequestOptions(NamedTuple):
    """What a request asks of its responses beyond the core's request: empty final
    responses (`triton_enable_empty_final_response`, streams), and the outputs to
    classify (name -> k), or None."""

    empty_final: bool
    classes: dict[str, int] | None


_PLAIN = RequestOptions(False, None)
_EMPTY_FINAL = RequestOptions(True, None)

# contents field -> (the datatypes it may carry, little-endian numpy dtype per datatype).
# As Triton: int_contents carries INT8/INT16/INT32 (each element truncated to the
# datatype's width), uint_contents UINT8/UINT16/UINT32; FP16/BF16 have no typed field.
_CONTENTS: dict[str, dict[str, str]] = {
    "bool_contents": {"BOOL": "?"},
    "int_contents": {"INT8": "<i1", "INT16": "<i2", "INT32": "<i4"},
    "int64_contents": {"INT64": "<i8"},
    "uint_contents": {"UINT8": "<u1", "UINT16": "<u2", "UINT32": "<u4"},
    "uint64_contents": {"UINT64": "<u8"},
    "fp32_contents": {"FP32": "<f4"},
    "fp64_contents": {"FP64": "<f8"},
    "bytes_contents": {"BYTES": ""},
}
# The datatype named in Triton's "unexpected explicit tensor data ... of type" error.
_CONTENTS_TYPE = {"bool_contents": "BOOL", "int_contents": "INT32", "int64_contents": "INT64",
                  "uint_contents": "UINT32", "uint64_contents": "UINT64",
                  "fp32_contents": "FP32", "fp64_contents": "FP64", "bytes_contents": "BYTES"}
_STATUS = {code: getattr(grpc.StatusCode, code.grpc_status_name) for code in ErrorCode}


def status_code(error: ServerError) -> grpc.StatusCode:
    return _STATUS[error.code]


# The status message travels as the grpc-message trailer, percent-encoded (3 bytes for
# each byte outside printable ASCII and for "%"). Clients refuse trailers past 8 KiB
# (their soft limit; the call then fails RESOURCE_EXHAUSTED instead of with the error),
# so a longer message is cut to this many encoded bytes.
MAX_STATUS_MESSAGE = 4096


def status_message(message: str, limit: int = MAX_STATUS_MESSAGE) -> str:
    """`message`, cut (at a character boundary, saying so) to fit the trailer."""
    data = message.encode("utf-8", "surrogatepass")
    if len(data) * 3 <= limit:  # fits whatever its bytes are
        return message
    cost = 0
    room = limit - 64  # what the note on the cut takes
    for index, byte in enumerate(data):
        cost += 1 if 0x20 <= byte <= 0x7E and byte != 0x25 else 3
        if cost > room:
            break
    else:
        return message
    kept = data[:index].decode("utf-8", "ignore")
    return f"{kept}... ({len(data) - len(kept.encode())} more bytes cut)"


def model_version(text: str) -> str:
    """Triton's GetModelVersionFromString: "" is the latest, else an integer >= 0."""
    if not text:
        return text
    try:
        version = int(text)
    except ValueError:
        raise invalid_arg(f"failed to get model version from specified version string "
                          f"'{text}' (details: stol), version should be an integral "
                          f"value > 0") from None
    if version < 0:
        raise invalid_arg(f"invalid model version specified '{text}' , version should be "
                          f"an integral value > 0")
    return str(version)


# --- request -------------------------------------------------------------------------

def decode_infer_request(request: pb.ModelInferRequest, version: str,
                         raw: list[Any] | None = None, placed: list[Any] | None = None
                         ) -> tuple[InferRequest, RequestOptions]:
    """The core's request, and what it asks of its responses (RequestOptions).
    `raw`: the raw input contents when they were split off the message (grpc/wire.py);
    by default the message's `raw_input_contents`. `placed[i]`: where raw[i] lives in
    the parent's pool, or None (grpc/wire.py SplitRequest)."""
    model = request.model_name
    infer_request = InferRequest(model_name=model, model_version=version, id=request.id)
    empty_final = False
    if request.parameters:
        empty_final = _apply_parameters(infer_request, request.parameters)
    if raw is None:
        raw = request.raw_input_contents  # type: ignore[assignment]
    raw_count = len(raw)
    inputs = infer_request.inputs
    index = 0
    for tensor in request.inputs:
        if tensor.parameters:
            shm = tensor_shm(tensor)
            if shm is not None:
                if tensor.HasField("contents"):
                    raise invalid_arg(f"unexpected 'content' provided when using shared "
                                      f"memory for input tensor '{tensor.name}' for model "
                                      f"'{model}'")
                inputs.append(TensorData(tensor.name, tensor.datatype, tuple(tensor.shape),
                                         b"", shm))
                infer_request.uses_shm = True
                continue
        if tensor.HasField("contents"):
            if raw_count:
                raise invalid_arg(f"contents field must not be specified when using "
                                  f"raw_input_contents for '{tensor.name}' for model "
                                  f"'{model}'")
            data: Any = contents_to_raw(tensor, model)
        elif index < raw_count:
            data = raw[index]  # a message's: a new bytes object per access: read once
            if placed is not None:
                inputs.append(TensorData(tensor.name, tensor.datatype, tuple(tensor.shape),
                                         data, None, placed[index]))
                index += 1
                continue
            index += 1
        else:
            raise invalid_arg(f"unable to find data for input tensor '{tensor.name}' for "
                              f"model '{model}' in request.")
        inputs.append(TensorData(tensor.name, tensor.datatype, tuple(tensor.shape), data))
    classes: dict[str, int] | None = None
    if request.outputs:
        names = infer_request.requested_outputs = []
        for output in request.outputs:
            names.append(output.name)
            if output.parameters:
                count = _output_parameters(infer_request, output)
                if count is not None:
                    if classes is None:
                        classes = {}
                    classes[output.name] = count
    if classes is not None:
        return infer_request, RequestOptions(empty_final, classes)
    return infer_request, _EMPTY_FINAL if empty_final else _PLAIN


def contents_to_raw(tensor: InputTensor, model: str) -> bytes:
    """Typed `contents` -> raw bytes in Triton's layout, refusing a field that does not
    match the input's datatype (or more than one field), with Triton's messages."""
    contents = tensor.contents
    data = b""
    seen = False
    for field, values in contents.ListFields():
        name = field.name
        if seen:
            raise invalid_arg(f"unexpected explicit tensor data for input tensor "
                              f"'{tensor.name}' for model '{model}', binary data was "
                              f"already supplied.")
        seen = True
        dtype = _CONTENTS[name].get(tensor.datatype)
        if dtype is None:
            raise invalid_arg(f"unexpected explicit tensor data for input tensor "
                              f"'{tensor.name}' for model '{model}' of type "
                              f"'{_CONTENTS_TYPE[name]}', expected datatype "
                              f"'{tensor.datatype}'")
        if name == "bytes_contents":
            data = b"".join(len(item).to_bytes(4, "little") + item for item in values)
        elif name in ("int_contents", "uint_contents") and dtype[-1] != "4":
            # keep the low bytes of each 32-bit element, as Triton does
            wide = np.array(values, dtype="<i4" if name == "int_contents" else "<u4")
            data = wide.astype(dtype).tobytes()
        else:
            data = np.array(values, dtype=dtype).tobytes()
    return data


def _output_parameters(request: InferRequest,
                       output: pb.ModelInferRequest.InferRequestedOutputTensor
                       ) -> int | None:
    """A requested output's shared-memory region (set on `request`) and its
    classification's k (None: not asked for), checked as Triton checks them."""
    shm = tensor_shm(output)
    count = None
    param = output.parameters.get("classification")
    if param is not None:
        if param.WhichOneof("parameter_choice") != "int64_param":
            raise invalid_arg("invalid value type for 'classification' parameter, "
                              "expected int64_param")
        if param.int64_param <= 0:
            raise invalid_arg("invalid value for 'classification' parameter, "
                              "expected >= 0")
        if shm is not None:
            raise invalid_arg("output can't set both 'shared_memory_region' and "
                              "'classification'")
        count = param.int64_param & UINT32  # Triton keeps a uint32 (0: none listed)
    if shm is not None:
        if request.output_shm is None:
            request.output_shm = {}
        request.output_shm[output.name] = shm
        request.uses_shm = True
    return count


def _apply_parameters(request: InferRequest, params: Any) -> bool:
    """Triton's request-level parameters -> request fields; the rest pass through with
    their type. Returns the `triton_enable_empty_final_response` flag."""
    empty_final = False
    for key, param in params.items():
        kind = param.WhichOneof("parameter_choice")
        if key == "sequence_id":
            if kind == "int64_param":
                request.correlation_id = param.int64_param & _UINT64
            elif kind == "string_param":
                request.correlation_id = param.string_param
            else:
                raise invalid_arg("invalid value type for 'sequence_id' parameter, "
                                  "expected int64_param or string_param.")
        elif key == "sequence_start" or key == "sequence_end":
            if kind != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected "
                                  f"bool_param.")
            if param.bool_param:
                request.flags |= (FLAG_SEQUENCE_START if key == "sequence_start"
                                  else FLAG_SEQUENCE_END)
        elif key == "priority":
            if kind == "int64_param":
                if param.int64_param < 0:
                    raise invalid_arg("invalid value for 'priority', expected value >= 0.")
                request.priority = param.int64_param
            elif kind == "uint64_param":
                request.priority = param.uint64_param
            else:
                raise invalid_arg("invalid value type for 'priority' parameter, expected "
                                  "int64_param or uint64_param.")
        elif key == "timeout":
            if kind != "int64_param":
                raise invalid_arg("invalid value type for 'timeout' parameter, expected "
                                  "int64_param.")
            request.timeout_us = param.int64_param & _UINT64
        elif key.startswith("triton_"):
            if key != EMPTY_FINAL_KEY:
                raise invalid_arg(f"parameter keys starting with 'triton_' are reserved "
                                  f"for Triton usage. Only the following keys starting "
                                  f"with 'triton_' are allowed: {EMPTY_FINAL_KEY}")
            if kind != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected "
                                  f"bool_param.")
            empty_final = param.bool_param
        elif kind in ("int64_param", "bool_param", "string_param", "double_param"):
            request.parameters[key] = getattr(param, kind)
        else:
            raise invalid_arg(f"invalid value type for '{key}' parameter, expected "
                              f"int64_param, bool_param, or string_param.")
    return empty_final


# --- response ------------------------------------------------------------------------

def encode_infer_response(response: InferResponse) -> pb.ModelInferResponse:
    """A successful response as protobuf; its bytes are copied, so the caller may
    release the response as soon as this returns."""
    message = encode_response_header(response)
    raw = message.raw_output_contents
    for tensor in response.outputs:
        data = tensor.data
        if tensor.shm is not None:  # written into the client's region: no data here
            raw.append(b"")
            continue
        raw.append(data if type(data) is bytes else bytes(byte_view(data)))
    return message


def encode_infer_response_bytes(response: InferResponse) -> bytes:
    """A successful response's wire bytes, each output copied once (from its buffer into
    the bytes), so the caller may release the response as soon as this returns."""
    return b"".join(infer_response_parts(response, encode_response_header(response)))


def encode_response_header(response: InferResponse) -> pb.ModelInferResponse:
    """The response without its raw output contents."""
    message = pb.ModelInferResponse(model_name=response.model_name,
                                    model_version=response.model_version, id=response.id)
    if response.parameters:
        set_parameters(message.parameters, response.parameters)
    outputs = message.outputs
    for tensor in response.outputs:
        output = outputs.add()
        output.name = tensor.name
        output.datatype = tensor.datatype
        output.shape.extend(tensor.shape)
    return message


def set_parameters(target: Any, values: dict[str, Any]) -> None:
    """Python values -> an InferParameter map (bool, int64, double, string)."""
    for key, value in values.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = str(value)
