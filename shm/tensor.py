"""Tensor layout in shared memory: descriptors, numpy views, Triton's BYTES format.

A tensor crosses between processes as a descriptor tuple
`(name, datatype, shape, region, offset, nbytes)`; its bytes stay in the region.
Numeric tensors are little-endian C-order arrays, viewed with numpy without a copy.
BYTES tensors use Triton's layout: per element, a 4-byte little-endian length then the
bytes, elements in C order.
"""

from __future__ import annotations

import itertools
import struct
from typing import Iterable, NamedTuple

import numpy as np

NUMPY_OF_DATATYPE: dict[str, type] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}
ITEMSIZE: dict[str, int] = {
    name: np.dtype(t).itemsize for name, t in NUMPY_OF_DATATYPE.items() if name != "BYTES"
}
ITEMSIZE["BF16"] = 2
_LEN = struct.Struct("<I")
_ENDLESS = itertools.repeat(None)  # the walk's loop without a count (stateless, shared)
_unpack_length = _LEN.unpack_from  # bound once: the BYTES walk is on the request path


class TensorDesc(NamedTuple):
    """Where a tensor's bytes are: plain tuple so that it crosses the queue cheaply."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    region: str
    offset: int
    nbytes: int


def element_count(shape: Iterable[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def numeric_view(datatype: str, shape: tuple[int, ...], buffer) -> np.ndarray:
    """A numpy view (no copy) over a raw little-endian buffer."""
    array = np.frombuffer(buffer, dtype=NUMPY_OF_DATATYPE[datatype])
    return array.reshape(shape)


def bytes_items(array: np.ndarray) -> list[bytes]:
    """The elements of a BYTES array as bytes (str is UTF-8 encoded), in C order."""
    items = []
    for item in array.reshape(-1):
        if isinstance(item, bytes):
            items.append(item)
        elif isinstance(item, str):
            items.append(item.encode("utf-8"))
        else:
            items.append(str(item).encode("utf-8"))
    return items


def serialized_size(items: list[bytes]) -> int:
    return sum(len(x) for x in items) + _LEN.size * len(items)


def serialize_bytes_into(items: list[bytes], buffer: memoryview) -> int:
    """Write `items` in Triton's layout into `buffer`; returns bytes written."""
    pos = 0
    for item in items:
        _LEN.pack_into(buffer, pos, len(item))
        pos += _LEN.size
        buffer[pos:pos + len(item)] = item
        pos += len(item)
    return pos


def serialize_bytes(items: list[bytes]) -> bytes:
    out = bytearray(serialized_size(items))
    serialize_bytes_into(items, memoryview(out))
    return bytes(out)


class BytesLayoutError(ValueError):
    """A buffer that does not hold Triton's BYTES layout, and where it stops holding it.

    `index`: the element that does not fit; `offset`: where its length prefix starts;
    `declared`: the length that prefix declares (None: the prefix itself is cut, or the
    buffer ended before the `count` elements asked for); `left`: the bytes left for what
    was being read (the prefix, or the element after its prefix); `items`: what
    `bytes_elements` had made of the elements before it.
    """

    def __init__(self, message: str, index: int, offset: int, declared: int | None,
                 left: int, items: list) -> None:
        super().__init__(message)
        self.index, self.offset, self.declared = index, offset, declared
        self.left, self.items = left, items


def bytes_elements(buffer: bytes | bytearray | memoryview, count: int | None = None,
                   convert: type[bytes] | type[str] | None = None) -> list:
    """Triton's BYTES layout, walked once: each element's (start, end) in `buffer`, or
    with `convert` its bytes (`bytes`) or its text (`str`: UTF-8, UnicodeDecodeError).

    Without `count`, the elements up to the buffer's end; with it, exactly `count`
    elements, bytes after them ignored (a pool block may be larger than its tensor).
    BytesLayoutError when an element or its length prefix runs past the end, or the
    buffer ends before `count` elements. `convert` needs a buffer of bytes (format "B").
    """
    size = buffer.nbytes if type(buffer) is memoryview else len(buffer)
    items: list = []
    start = 0
    for _ in _ENDLESS if count is None else range(count):
        if start >= size:
            break
        end = start + 4
        if end > size:
            raise BytesLayoutError("BYTES buffer ends inside an element's length prefix",
                                   len(items), start, None, size - start, items)
        (length,) = _unpack_length(buffer, start)
        start = end + length
        if start > size:
            raise BytesLayoutError("BYTES buffer ends inside an element",
                                   len(items), end - 4, length, size - end, items)
        if convert is str:
            items.append(str(buffer[end:start], "utf-8"))
        elif convert is None:
            items.append((end, start))
        else:
            items.append(bytes(buffer[end:start]))
    if count is not None and len(items) != count:
        raise BytesLayoutError(f"BYTES buffer holds {len(items)} elements, expected {count}",
                               len(items), start, None, 0, items)
    return items


def deserialize_bytes(buffer, count: int | None = None) -> list[bytes]:
    """Split a Triton BYTES buffer into its elements; BytesLayoutError (a ValueError)
    if malformed."""
    view = buffer if isinstance(buffer, bytes) else memoryview(buffer).cast("B")
    return bytes_elements(view, count, bytes)


def bytes_array(buffer, shape: tuple[int, ...]) -> np.ndarray:
    """A numpy object array of bytes from a Triton BYTES buffer."""
    items = deserialize_bytes(buffer, element_count(shape))
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array.reshape(shape)
