"""Triton dtype tables and the BYTES wire layout."""

import struct

import numpy as np
import pytest

import backend_utils as pb
from backend_utils import dtypes
from backend_utils.error import TritonModelException

CODES = [
    (1, np.bool_), (2, np.uint8), (3, np.uint16), (4, np.uint32), (5, np.uint64),
    (6, np.int8), (7, np.int16), (8, np.int32), (9, np.int64), (10, np.float16),
    (11, np.float32), (12, np.float64), (13, np.object_),
]


@pytest.mark.parametrize(("code", "numpy_type"), CODES)
def test_triton_to_numpy_and_back_use_tritons_codes(code, numpy_type):
    assert pb.triton_to_numpy_type(code) is numpy_type
    assert pb.numpy_to_triton_type(numpy_type) == code
    assert pb.numpy_to_triton_type(np.dtype(numpy_type)) == code


def test_unknown_codes_and_types_map_to_none():
    assert pb.triton_to_numpy_type(14) is None  # BF16 has no numpy type
    assert pb.triton_to_numpy_type(99) is None
    assert pb.numpy_to_triton_type(np.complex64) is None
    assert pb.numpy_to_triton_type(np.bytes_) == 13


def test_triton_string_to_numpy_covers_config_names():
    assert pb.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb.triton_string_to_numpy("TYPE_BOOL") is bool
    assert len(pb.TRITON_STRING_TO_NUMPY) == 13
    with pytest.raises(KeyError):
        pb.triton_string_to_numpy("TYPE_BF16")


def test_serialize_byte_tensor_writes_length_prefixed_elements_in_c_order():
    array = np.array([[b"ab", "c"], [1, b""]], dtype=np.object_)
    encoded = pb.serialize_byte_tensor(array.T)  # non-contiguous: still C order of the view
    expected = b"".join(struct.pack("<I", len(s)) + s for s in [b"ab", b"1", b"c", b""])
    assert encoded == expected


def test_serialize_byte_tensor_quirks_match_triton():
    assert pb.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb.serialize_byte_tensor(np.array([1, 2], dtype=np.int32)) is None
    assert pb.serialize_byte_tensor(np.array([b"x\x00y"], dtype=np.bytes_)) == b"\x03\x00\x00\x00x\x00y"


def test_deserialize_bytes_tensor_inverts_serialize():
    data = [b"hello", b"", "wörld".encode()]
    out = pb.deserialize_bytes_tensor(pb.serialize_byte_tensor(np.array(data, dtype=np.object_)))
    assert out.dtype == np.object_ and out.shape == (3,)
    assert list(out) == data


def test_deserialize_rejects_truncated_buffers():
    with pytest.raises(TritonModelException, match="incomplete length field"):
        pb.deserialize_bytes_tensor(b"\x01\x00")
    with pytest.raises(TritonModelException, match="extends beyond buffer"):
        pb.deserialize_bytes_tensor(b"\x05\x00\x00\x00abc")


def test_counted_deserialize_ignores_trailing_pool_bytes():
    out = dtypes._deserialize_bytes(b"\x01\x00\x00\x00a" + b"\xff" * 8, 1)
    assert list(out) == [b"a"]


def test_datatype_names_round_trip():
    for code in range(1, 15):
        assert dtypes._code_of_name(dtypes._name_of_code(code)) == code
    assert dtypes._code_of_name("TYPE_STRING") == 13
    with pytest.raises(TritonModelException):
        dtypes._code_of_name("FP8")
