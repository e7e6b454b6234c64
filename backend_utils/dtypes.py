"""Triton data types: names, TRITONSERVER_DataType codes, numpy types, BYTES layout.

The public functions keep Triton's signatures and quirks (e.g. `serialize_byte_tensor`
of an empty array returns `()`); the `_`-prefixed helpers are what the rest of the
package uses.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from .error import TritonModelException

# TRITONSERVER_DataType codes.
TYPE_BOOL = 1
TYPE_UINT8 = 2
TYPE_UINT16 = 3
TYPE_UINT32 = 4
TYPE_UINT64 = 5
TYPE_INT8 = 6
TYPE_INT16 = 7
TYPE_INT32 = 8
TYPE_INT64 = 9
TYPE_FP16 = 10
TYPE_FP32 = 11
TYPE_FP64 = 12
TYPE_BYTES = 13
TYPE_BF16 = 14

_CODE_TO_NAME: dict[int, str] = {
    TYPE_BOOL: "BOOL",
    TYPE_UINT8: "UINT8",
    TYPE_UINT16: "UINT16",
    TYPE_UINT32: "UINT32",
    TYPE_UINT64: "UINT64",
    TYPE_INT8: "INT8",
    TYPE_INT16: "INT16",
    TYPE_INT32: "INT32",
    TYPE_INT64: "INT64",
    TYPE_FP16: "FP16",
    TYPE_FP32: "FP32",
    TYPE_FP64: "FP64",
    TYPE_BYTES: "BYTES",
    TYPE_BF16: "BF16",
}
_NAME_TO_CODE: dict[str, int] = {name: code for code, name in _CODE_TO_NAME.items()}

# numpy scalar type per code, as Triton's triton_to_numpy_type answers (no BF16).
_CODE_TO_NUMPY: dict[int, type] = {
    TYPE_BOOL: np.bool_,
    TYPE_UINT8: np.uint8,
    TYPE_UINT16: np.uint16,
    TYPE_UINT32: np.uint32,
    TYPE_UINT64: np.uint64,
    TYPE_INT8: np.int8,
    TYPE_INT16: np.int16,
    TYPE_INT32: np.int32,
    TYPE_INT64: np.int64,
    TYPE_FP16: np.float16,
    TYPE_FP32: np.float32,
    TYPE_FP64: np.float64,
    TYPE_BYTES: np.object_,
}

# Little-endian storage dtype of fixed-size types (BF16 is carried as raw uint16).
_CODE_TO_STORAGE: dict[int, np.dtype] = {
    code: np.dtype(t).newbyteorder("<")
    for code, t in _CODE_TO_NUMPY.items()
    if code != TYPE_BYTES
}
_CODE_TO_STORAGE[TYPE_BF16] = np.dtype("<u2")

TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

_LENGTH = struct.Struct("<I")


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """numpy type for a config data_type such as "TYPE_FP32"; KeyError if unknown."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> type | None:
    """numpy type for a TRITONSERVER_DataType code, None for BF16 or unknown codes."""
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """TRITONSERVER_DataType code for a numpy type or dtype, None if Triton has none."""
    for code, numpy_type in _CODE_TO_NUMPY.items():
        try:
            if data_type == numpy_type:
                return code
        except TypeError:
            return None
    if data_type == np.bytes_:
        return TYPE_BYTES
    return None


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | tuple[()] | None:
    """Triton's BYTES layout: each element as <u32 little-endian length><bytes>, C order.

    Elements of object arrays that are not `bytes` are `str()`-ed and UTF-8 encoded.
    Like Triton: `()` for an empty array, None for non-object/bytes_ arrays.
    """
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    return _serialize_bytes(input_tensor)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """Inverse of `serialize_byte_tensor`: a 1-D object array of `bytes`."""
    return _deserialize_bytes(encoded_tensor, None)


def _serialize_bytes(array: np.ndarray) -> bytes:
    """Serialise an object/bytes_ array (any size) into Triton's BYTES layout."""
    if array.size == 0:
        return b""
    parts: list[bytes] = []
    pack = _LENGTH.pack
    is_object = array.dtype == np.object_
    for item in array.ravel(order="C").tolist():
        if is_object and type(item) is not bytes:
            item = str(item).encode("utf-8")
        parts.append(pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def _deserialize_bytes(buffer: Any, count: int | None) -> np.ndarray:
    """Parse Triton's BYTES layout into a 1-D object array of `bytes`.

    With `count` given, exactly that many elements are read and trailing bytes are
    ignored (a pool buffer may be larger than the tensor); a short buffer is an error.
    """
    view = memoryview(buffer).cast("B")
    size = len(view)
    unpack = _LENGTH.unpack_from
    items: list[bytes] = []
    offset = 0
    while (offset < size) if count is None else (len(items) < count):
        if offset + 4 > size:
            raise TritonModelException("Invalid bytes tensor data: incomplete length field")
        (length,) = unpack(view, offset)
        offset += 4
        if offset + length > size:
            raise TritonModelException(
                "Invalid bytes tensor data: string extends beyond buffer"
            )
        items.append(view[offset : offset + length].tobytes())
        offset += length
    result = np.empty(len(items), dtype=np.object_)
    result[:] = items
    return result


# Native-order numeric dtypes (a dict: this lookup is on every Tensor construction).
_DTYPE_TO_CODE: dict[np.dtype, int] = {
    np.dtype(t): code for code, t in _CODE_TO_NUMPY.items() if code != TYPE_BYTES
}


def _code_of_dtype(dtype: np.dtype) -> int | None:
    """Triton code for a numpy dtype as the Tensor constructor accepts it: native byte
    order numerics, object and bytes_ (BYTES); None otherwise."""
    code = _DTYPE_TO_CODE.get(dtype)
    if code is not None:
        return code
    if dtype.type is np.bytes_ or dtype == np.object_:
        return TYPE_BYTES
    return None


def _name_of_code(code: int) -> str:
    return _CODE_TO_NAME[code]


def _code_of_name(name: str) -> int:
    """Code for a wire datatype name ("FP32"); also accepts config names ("TYPE_FP32")."""
    code = _NAME_TO_CODE.get(name)
    if code is not None:  # a wire name, as on every tensor the stub receives
        return code
    if name.startswith("TYPE_"):
        name = "BYTES" if name == "TYPE_STRING" else name[5:]
    try:
        return _NAME_TO_CODE[name]
    except KeyError:
        raise TritonModelException(f"Unsupported triton datatype '{name}'.") from None


def _storage_dtype(code: int) -> np.dtype:
    """numpy dtype that holds a fixed-size type's bytes (BF16 -> uint16)."""
    return _CODE_TO_STORAGE[code]
