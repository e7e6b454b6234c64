"""KServe v2 tensors over HTTP: JSON `data` lists and the binary tensor extension.

Decoding turns a request header (JSON) plus the binary section of the body into an
`InferRequest` whose input data are raw little-endian bytes in Triton's layout;
binary inputs are memoryview slices of the body (no copy). Encoding turns an
`InferResponse` into a JSON header plus the buffers of its binary outputs, which are
written from their own memory.

Where Triton's behaviour is not the only sensible one, these choices are made:
* FP16 (and BF16) outputs cannot be JSON; Triton then fails the whole request with
  400 "sending FP16 data via JSON is not supported". pbserve sends them binary
  instead (tritonclient reads any output that carries `binary_data_size`). The same
  for outputs JSON cannot carry exactly: non-finite floats and non-UTF-8 BYTES.
* FP16 inputs are accepted as JSON numbers (Triton refuses them).
* A JSON `data` list whose element count does not match the shape is 400 (Triton: 500).
* A shared-memory or `classification` parameter of the wrong JSON type is 400
  (Triton: 500).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from pbserve.core.types import (
    FLAG_SEQUENCE_END,
    FLAG_SEQUENCE_START,
    InferRequest,
    InferResponse,
    ShmRef,
    TensorData,
)
from pbserve.errors import MalformedRequest, internal, invalid_arg
from pbserve.server import jsonio
from pbserve.server.buffers import byte_view, nbytes
from pbserve.server.classification import UINT32, class_count_error
from shm.tensor import BytesLayoutError, bytes_elements

NUMPY_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(t).newbyteorder("<") for name, t in {
        "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
        "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
        "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    }.items()
}
_BINARY_ONLY = frozenset(("FP16", "BF16"))
_FLOATS = frozenset(("FP32", "FP64"))
_LENGTH = struct.Struct("<I")
# Request parameters that Triton turns into request fields rather than passing on.
_RESERVED = frozenset(("sequence_id", "sequence_start", "sequence_end", "priority",
                       "timeout", "binary_data_output"))


class OutputPlan:
    """How each output goes back: binary or JSON, by name, with the default for outputs
    the request did not list (`binary_data_output`); `classes`: the outputs asked for as
    classifications (name -> k, server/classification.py), or None."""

    __slots__ = ("binary", "default_binary", "classes")

    def __init__(self, binary: dict[str, bool], default_binary: bool,
                 classes: dict[str, int] | None = None) -> None:
        self.binary = binary
        self.default_binary = default_binary
        self.classes = classes

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)


# --- request -------------------------------------------------------------------------

def parse_json(data: bytes | bytearray | memoryview, what: str) -> Any:
    """Parse JSON, with Triton's 400 on failure."""
    try:
        return jsonio.loads(data)
    except jsonio.DecodeError as exc:
        raise MalformedRequest(f"failed to parse the {what} JSON buffer: {exc}") from None


def decode_infer_request(model: str, version: str, header: Any,
                         binary: memoryview | list[tuple[memoryview, Any]]
                         ) -> tuple[InferRequest, OutputPlan]:
    """The parsed JSON header and the binary section after it -> an InferRequest. The
    section is one buffer, or the binary inputs already apart (a PlacedBody's
    `inputs`: each a view and the placer's handle, which the tensor carries)."""
    if not isinstance(header, dict):
        raise invalid_arg("the inference request must be a JSON object")
    request = InferRequest(model_name=model, model_version=version)
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise invalid_arg("Unable to parse 'id': expected a string")
    request.id = request_id
    inputs = header.get("inputs")
    if not isinstance(inputs, list):
        raise invalid_arg("Unable to parse 'inputs': expected an array")
    offset = 0
    for item in inputs:
        tensor, offset = _decode_input(model, item, binary, offset)
        request.inputs.append(tensor)
        if tensor.shm is not None:
            request.uses_shm = True
    if offset != len(binary):
        raise invalid_arg(f"unexpected additional input data for model '{model}'")
    default_binary = _apply_parameters(request, header.get("parameters"))
    binary, classes = _decode_outputs(request, header.get("outputs"))
    return request, OutputPlan(binary, default_binary, classes)


def _decode_input(model: str, item: Any, binary: memoryview | list[tuple[memoryview, Any]],
                  offset: int) -> tuple[TensorData, int]:
    """The input `item` and where the next binary input starts in `binary` (a byte
    offset in a buffer; an index in a list of inputs already apart)."""
    if not isinstance(item, dict):
        raise invalid_arg("Unable to parse 'inputs': each input must be a JSON object")
    name = item.get("name")
    datatype = item.get("datatype")
    shape = item.get("shape")
    if not isinstance(name, str):
        raise invalid_arg("Unable to parse 'name' of an input")
    if not isinstance(datatype, str):
        raise invalid_arg(f"Unable to parse 'datatype' of input '{name}'")
    if not isinstance(shape, list) or not all(
            type(d) is int and d >= 0 for d in shape):
        raise invalid_arg(f"Unable to parse 'shape' of input '{name}': "
                          f"expected an array of non-negative integers, got {shape!r}")
    params = item.get("parameters") or {}
    if not isinstance(params, dict):
        raise invalid_arg(f"Unable to parse 'parameters' of input '{name}'")
    size = params.get("binary_data_size")
    has_data = "data" in item
    has_shm = "shared_memory_region" in params
    if has_data + (size is not None) + has_shm != 1:
        raise invalid_arg(_content_error(name, has_data, size is not None, has_shm))
    if has_shm:
        return TensorData(name, datatype, tuple(shape), b"", tensor_shm(params)), offset
    if size is None:
        data = json_to_raw(name, datatype, shape, item["data"])
        return TensorData(name, datatype, tuple(shape), data), offset
    if type(size) is not int or size < 0:
        raise invalid_arg(f"Unable to parse 'binary_data_size' of input '{name}'")
    if type(binary) is list:  # placed_body.py read the same sizes off the same header
        view, placed = binary[offset]
        assert len(view) == size
        return TensorData(name, datatype, tuple(shape), view, placed=placed), offset + 1
    end = offset + size
    if end > len(binary):
        raise invalid_arg(f"unexpected size for input '{name}', expecting "
                          f"{end - len(binary)} additional bytes for model '{model}'")
    return TensorData(name, datatype, tuple(shape), binary[offset:end]), end


def _content_error(name: str, has_data: bool, has_binary: bool, has_shm: bool) -> str:
    found = " ".join(f for f, present in (("'data'", has_data),
                                           ("'binary_data_size'", has_binary),
                                           ("'shared_memory_region'", has_shm)) if present)
    return ("Input must set only one of the following fields: 'data', 'binary_data_size' "
            f"in 'parameters', 'shared_memory_region' in 'parameters'. But "
            f"{'set ' + found if found else 'no field is set'} (input '{name}')")


def tensor_shm(params: dict[str, Any]) -> ShmRef:
    """The client region an input's or output's `parameters` name (the caller saw
    `shared_memory_region` in them); offset and byte size default to 0, as in Triton."""
    region = params["shared_memory_region"]
    if not isinstance(region, str):
        raise invalid_arg("Unable to parse 'shared_memory_region': expected a string")
    return ShmRef(region, unsigned_field(params, "shared_memory_offset"),
                  unsigned_field(params, "shared_memory_byte_size"))


def unsigned_field(values: dict[str, Any], key: str) -> int:
    """An optional unsigned integer of a JSON object (0 when absent)."""
    value = values.get(key, 0)
    if type(value) is not int or value < 0:
        raise invalid_arg(f"Unable to parse '{key}': expected an unsigned integer")
    return value


def _decode_outputs(request: InferRequest, outputs: Any
                    ) -> tuple[dict[str, bool], dict[str, int] | None]:
    """The outputs listed: binary or JSON by name, and those asked for as
    classifications (name -> k), or None."""
    if outputs is None:
        return {}, None
    if not isinstance(outputs, list):
        raise invalid_arg("Unable to parse 'outputs': expected an array")
    binary: dict[str, bool] = {}
    classes: dict[str, int] | None = None
    for item in outputs:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            raise invalid_arg("Unable to parse 'name' of a requested output")
        params = item.get("parameters") or {}
        if not isinstance(params, dict):
            raise invalid_arg(f"Unable to parse 'parameters' of output '{name}'")
        flag = params.get("binary_data", False)
        if "shared_memory_region" in params:
            if "classification" in params:
                raise invalid_arg("Output can't set both 'shared_memory_region' and "
                                  "'classification'")
            if flag is True:
                raise invalid_arg("Output can't set both 'shared_memory_region' and "
                                  "'binary_data'")
            if request.output_shm is None:
                request.output_shm = {}
            request.output_shm[name] = tensor_shm(params)
            request.uses_shm = True
        elif "classification" in params:
            count = params["classification"]
            if type(count) is not int or not 0 <= count < 1 << 64:
                raise class_count_error()
            if count & UINT32:  # Triton keeps a uint32; 0 asks for the plain output
                if classes is None:
                    classes = {}
                classes[name] = count & UINT32
        if type(flag) is not bool:
            raise invalid_arg(f"Unable to parse 'binary_data' of output '{name}'")
        binary[name] = flag
    request.requested_outputs = list(binary)
    return binary, classes


def _apply_parameters(request: InferRequest, params: Any) -> bool:
    """Triton's request-level parameters -> request fields; the rest pass through.
    Returns `binary_data_output` (the default kind of unlisted outputs)."""
    if params is None:
        return False
    if not isinstance(params, dict):
        raise invalid_arg("Unable to parse 'parameters': expected a JSON object")
    default_binary = False
    for key, value in params.items():
        if key in _RESERVED:
            default_binary = _apply_reserved(request, key, value) or default_binary
        elif key.startswith("triton_"):
            raise invalid_arg("parameter keys starting with 'triton_' are reserved for "
                              "Triton usage and should not be specified.")
        elif isinstance(value, (str, int, float)):  # bool is an int
            request.parameters[key] = value
        else:
            raise invalid_arg(f"parameter '{key}' has invalid type. It should be either "
                              "'int', 'bool', or 'string'.")
    return default_binary


def _apply_reserved(request: InferRequest, key: str, value: Any) -> bool:
    if key == "sequence_id":
        if not (isinstance(value, str) or (type(value) is int and value >= 0)):
            raise invalid_arg("Unable to parse 'sequence_id'")
        request.correlation_id = value
    elif key in ("sequence_start", "sequence_end", "binary_data_output"):
        if type(value) is not bool:
            raise invalid_arg(f"Unable to parse '{key}': expected a boolean")
        if key == "binary_data_output":
            return value
        if value:
            request.flags |= FLAG_SEQUENCE_START if key == "sequence_start" else FLAG_SEQUENCE_END
    else:
        if type(value) is not int or value < 0:
            raise invalid_arg(f"Unable to parse '{key}': expected an unsigned integer")
        if key == "priority":
            request.priority = value
        else:
            request.timeout_us = value
    return False


# --- JSON tensor data -----------------------------------------------------------------

def element_count(shape: list[int] | tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def json_to_raw(name: str, datatype: str, shape: list[int], data: Any) -> bytes:
    """A JSON `data` value (nested or flat list) -> raw bytes in Triton's layout."""
    count = element_count(shape)
    if datatype == "BYTES":
        items = _flatten_strings(name, data)
        _check_count(name, shape, count, len(items))
        return b"".join(_LENGTH.pack(len(item)) + item for item in items)
    dtype = NUMPY_DTYPES.get(datatype)
    if dtype is None:
        raise invalid_arg(f"invalid datatype '{datatype}' for input '{name}'")
    if count == 0:
        return b""
    array = _numbers(name, datatype, data)
    _check_count(name, shape, count, array.size)
    return _cast(name, datatype, dtype, array).tobytes()


def _check_count(name: str, shape: list[int], expected: int, got: int) -> None:
    if got != expected:
        raise invalid_arg(f"Unable to parse 'data' of input '{name}': shape {shape} "
                          f"needs {expected} elements, 'data' holds {got}")


def _numbers(name: str, datatype: str, data: Any) -> np.ndarray:
    """Let numpy infer the JSON values' own type first, so that strings or booleans
    where numbers belong are refused rather than silently converted."""
    if not isinstance(data, list):
        raise invalid_arg(f"Unable to parse 'data' of input '{name}': expected an array")
    try:
        array = np.array(data)
    except (ValueError, OverflowError):
        raise invalid_arg(f"Unable to parse 'data' of input '{name}': expected a "
                          f"rectangular array of {datatype} values") from None
    kind = array.dtype.kind
    allowed = "b" if datatype == "BOOL" else ("iuf" if datatype in _FLOATS
                                            or datatype in _BINARY_ONLY else "iu")
    if kind in "fO" and allowed == "iu":
        # numpy infers float64 for ints beyond int64 mixed with small ones (UINT64)
        return _exact_integers(name, datatype, data)
    if array.size and kind not in allowed:
        raise invalid_arg(f"Unable to parse 'data' of input '{name}': expected "
                          f"{datatype} values, got {_kind_name(kind)}")
    return array


def _exact_integers(name: str, datatype: str, data: list) -> np.ndarray:
    """Slow path: numpy infers float64 (or object) for integers beyond int64 mixed with
    others, so check that every element is a JSON integer and convert exactly."""
    flat = np.array(data, dtype=object).ravel().tolist()
    if not all(type(v) is int for v in flat):
        raise invalid_arg(f"Unable to parse 'data' of input '{name}': expected "
                          f"{datatype} values (integers)")
    try:
        return np.array(flat, dtype=NUMPY_DTYPES[datatype])
    except OverflowError:
        raise invalid_arg(f"Unable to parse 'data' of input '{name}': a value is out of "
                          f"the range of {datatype}") from None


def _kind_name(kind: str) -> str:
    return {"b": "booleans", "f": "floating-point numbers", "U": "strings",
            "O": "mixed or out-of-range values"}.get(kind, "integers")


def _cast(name: str, datatype: str, dtype: np.dtype, array: np.ndarray) -> np.ndarray:
    if dtype.kind in "iu" and array.size:
        info = np.iinfo(dtype)
        if int(array.min()) < info.min or int(array.max()) > info.max:
            raise invalid_arg(f"Unable to parse 'data' of input '{name}': a value is out "
                              f"of the range of {datatype}")
    return array.astype(dtype, copy=False)


def _flatten_strings(name: str, data: Any) -> list[bytes]:
    if not isinstance(data, list):
        raise invalid_arg(f"Unable to parse 'data' of input '{name}': expected an array")
    items: list[bytes] = []
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(reversed(value))
        elif isinstance(value, str):
            items.append(value.encode("utf-8"))
        else:
            raise invalid_arg(f"Unable to parse 'data' of input '{name}': BYTES elements "
                              f"must be strings, got {type(value).__name__}")
    return items


def raw_to_json(output: TensorData) -> list | None:
    """Raw output bytes -> a flat JSON list, or None when JSON cannot carry them exactly
    (FP16/BF16, non-finite floats, non-UTF-8 BYTES): those go binary."""
    datatype = output.datatype
    if datatype == "BYTES":
        return _bytes_to_json(output)
    if datatype in _BINARY_ONLY:
        return None
    dtype = NUMPY_DTYPES.get(datatype)
    if dtype is None:
        raise internal(f"output '{output.name}' has unknown datatype '{datatype}'")
    count = element_count(output.shape)
    if nbytes(output.data) != count * dtype.itemsize:
        raise internal(f"output tensor shape does not match size of output for "
                       f"'{output.name}'")
    array = np.frombuffer(output.data, dtype=dtype)
    if datatype in _FLOATS and not np.isfinite(array).all():
        return None
    return array.tolist()


def _bytes_to_json(output: TensorData) -> list | None:
    try:
        return bytes_elements(byte_view(output.data), element_count(output.shape), str)
    except BytesLayoutError:
        raise internal(f"output tensor shape does not match size of output for "
                       f"'{output.name}'") from None
    except UnicodeDecodeError:
        return None


# --- response ------------------------------------------------------------------------

def encode_infer_response(response: InferResponse,
                          plan: OutputPlan) -> tuple[dict[str, Any], list]:
    """The response JSON object and the binary output buffers, in output order."""
    outputs = []
    buffers = []
    for output in response.outputs:
        entry: dict[str, Any] = {"name": output.name, "datatype": output.datatype,
                                 "shape": list(output.shape)}
        if output.shm is not None:  # written into the client's region: no data here
            outputs.append(entry)
            continue
        values = None if plan.is_binary(output.name) else raw_to_json(output)
        if values is None:
            data = byte_view(output.data)
            entry["parameters"] = {"binary_data_size": len(data)}
            if len(data):
                buffers.append(data)
        else:
            entry["data"] = values
        outputs.append(entry)
    body: dict[str, Any] = {"model_name": response.model_name,
                            "model_version": response.model_version}
    if response.id:
        body["id"] = response.id
    if response.parameters:
        body["parameters"] = response.parameters
    body["outputs"] = outputs
    return body, buffers
