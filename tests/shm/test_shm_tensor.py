"""shm.tensor: zero-copy numeric views over shared memory and Triton's BYTES layout."""

from __future__ import annotations


import numpy as np
import pytest

from shm.names import entries_with_prefix, new_prefix, unlink_prefix
from shm.pool import Pool
from shm.tensor import (
    ITEMSIZE,
    NUMPY_OF_DATATYPE,
    TensorDesc,
    bytes_array,
    bytes_items,
    deserialize_bytes,
    element_count,
    numeric_view,
    serialize_bytes,
    serialize_bytes_into,
    serialized_size,
)

from child_process import run_py

NUMERIC = [name for name in NUMPY_OF_DATATYPE if name != "BYTES"]


@pytest.fixture
def pool():
    prefix = new_prefix()
    pool = Pool(prefix, default_size=1 << 20)
    yield pool
    pool.close()
    unlink_prefix(prefix)
    assert entries_with_prefix(prefix) == []


@pytest.mark.parametrize("datatype", NUMERIC)
def test_numeric_view_is_zero_copy_both_ways(pool, datatype):
    shape = (3, 4)
    itemsize = ITEMSIZE[datatype]
    block = pool.alloc(element_count(shape) * itemsize)
    raw = pool.view(block)
    array = numeric_view(datatype, shape, raw)
    assert array.shape == shape and array.dtype == np.dtype(NUMPY_OF_DATATYPE[datatype])
    assert array.flags.c_contiguous and array.flags.writeable
    assert np.shares_memory(array, np.frombuffer(pool.region(block.region).map, np.uint8))
    # Through the array, seen in the raw bytes...
    array[...] = np.ones(shape, dtype=array.dtype)
    one = np.ones(1, dtype=array.dtype).tobytes()  # little-endian host, like Triton
    assert bytes(raw) == one * element_count(shape)
    # ...and through the raw bytes, seen in the array.
    raw[-itemsize:] = bytes(itemsize)
    assert array[2, 3] == 0
    assert array[0, 0] == 1
    del array, raw


CHILD_SCALE = r"""
import sys
from shm.pool import RegionMap
from shm.tensor import TensorDesc, numeric_view
name, datatype, d0, d1, region, offset, nbytes = sys.argv[1:]
desc = TensorDesc(name, datatype, (int(d0), int(d1)), region, int(offset), int(nbytes))
regions = RegionMap()
array = numeric_view(desc.datatype, desc.shape, regions.view(desc.region, desc.offset, desc.nbytes))
print(float(array.sum()))
array *= 2  # in place, in the parent's memory
del array
regions.close()
"""


def test_numeric_view_across_processes_from_a_descriptor(pool):
    shape = (5, 7)
    block = pool.alloc(element_count(shape) * 4)
    array = numeric_view("FP32", shape, pool.view(block))
    array[...] = np.arange(35, dtype=np.float32).reshape(shape)
    desc = TensorDesc("INPUT0", "FP32", shape, block.region, block.offset, block.nbytes)
    out = run_py(CHILD_SCALE, desc.name, desc.datatype, *desc.shape, desc.region,
                 desc.offset, desc.nbytes)
    assert float(out) == float(np.arange(35).sum())
    # The parent's array (never re-read) shows the child's in-place change.
    np.testing.assert_array_equal(array, 2 * np.arange(35, dtype=np.float32).reshape(shape))
    del array


ITEMS = [b"", b"plain", "h\u00e9llo \u4e16\u754c".encode(), b"\xff\xfe\x00\x80", b"\x00" * 3, b""]


def test_bytes_round_trip_with_empty_and_non_utf8_elements():
    encoded = serialize_bytes(ITEMS)
    assert len(encoded) == serialized_size(ITEMS) == sum(map(len, ITEMS)) + 4 * len(ITEMS)
    assert encoded[:8] == b"\x00\x00\x00\x00\x05\x00\x00\x00"  # little-endian lengths
    assert deserialize_bytes(encoded) == ITEMS
    assert deserialize_bytes(encoded, len(ITEMS)) == ITEMS
    array = bytes_array(encoded, (2, 3))
    assert array.shape == (2, 3) and array.dtype == np.object_
    assert array.reshape(-1).tolist() == ITEMS
    assert bytes_items(array) == ITEMS


def test_bytes_layout_in_shared_memory_read_from_a_memoryview(pool):
    block = pool.alloc(serialized_size(ITEMS))
    written = serialize_bytes_into(ITEMS, pool.view(block))
    assert written == block.nbytes
    assert bytes(pool.view(block)) == serialize_bytes(ITEMS)
    assert deserialize_bytes(pool.view(block), len(ITEMS)) == ITEMS


def test_empty_bytes_tensors():
    assert serialize_bytes([]) == b""
    assert deserialize_bytes(b"") == []
    assert deserialize_bytes(b"", 0) == []
    assert bytes_array(b"", (0, 3)).shape == (0, 3)
    assert deserialize_bytes(b"\x00\x00\x00\x00") == [b""]
    assert bytes_array(b"\x00\x00\x00\x00", (1, 1)).tolist() == [[b""]]


def test_bytes_items_encodes_str_and_other_objects():
    array = np.array(["\u00e9", b"\xff", 7], dtype=np.object_)
    assert bytes_items(array) == [b"\xc3\xa9", b"\xff", b"7"]
    assert bytes_items(np.array([[b"a", b"b"], [b"c", b"d"]], dtype=np.object_)) == [
        b"a", b"b", b"c", b"d"]  # C order


@pytest.mark.parametrize(("buffer", "count", "match"), [
    (b"\x01\x00", None, "length prefix"),
    (b"\x01\x00\x00\x00a\x02", None, "length prefix"),
    (b"\x05\x00\x00\x00abc", None, "inside an element"),
    (b"\xff\xff\xff\xff", None, "inside an element"),
    (b"\x01\x00\x00\x00a", 2, "expected 2"),
    (b"", 1, "expected 1"),
    (b"\x01\x00\x00\x00a\x09\x00\x00\x00b", 2, "inside an element"),
])
def test_malformed_bytes_buffers_raise_value_error(buffer, count, match):
    with pytest.raises(ValueError, match=match):
        deserialize_bytes(buffer, count)


def test_bytes_array_with_too_few_elements_for_its_shape_is_a_value_error():
    with pytest.raises(ValueError):
        bytes_array(serialize_bytes([b"a", b"b", b"c"]), (2, 2))
