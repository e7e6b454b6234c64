"""shm.tensor.bytes_elements: the one walk over Triton's BYTES layout, and its errors."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from shm.tensor import BytesLayoutError, bytes_elements, serialize_bytes

ITEMS = [b"ab", b"", "\u00e9".encode(), b"\xff"]
ENCODED = serialize_bytes(ITEMS)  # 4+2, 4+0, 4+2, 4+1 bytes


def test_a_good_layout_gives_spans_bytes_or_text() -> None:
    assert bytes_elements(ENCODED) == [(4, 6), (10, 10), (14, 16), (20, 21)]
    assert bytes_elements(memoryview(ENCODED), None, bytes) == ITEMS
    assert bytes_elements(ENCODED[:16], None, str) == ["ab", "", "\u00e9"]
    with pytest.raises(UnicodeDecodeError):
        bytes_elements(ENCODED, None, str)


def test_a_count_reads_that_many_and_ignores_what_follows() -> None:
    assert bytes_elements(ENCODED + b"\xff\xff", 2, bytes) == [b"ab", b""]
    assert bytes_elements(ENCODED, 0) == []
    # a memoryview of another format is walked by its bytes
    numbers = memoryview(np.frombuffer(serialize_bytes([b"abcd", b""]), dtype=np.uint32))
    assert bytes_elements(numbers) == [(4, 8), (12, 12)]


def test_an_empty_buffer_has_no_elements_unless_some_are_expected() -> None:
    assert bytes_elements(b"") == []
    with pytest.raises(BytesLayoutError, match=r"^BYTES buffer holds 0 elements, expected 1$") \
            as caught:
        bytes_elements(b"", 1)
    assert (caught.value.index, caught.value.declared, caught.value.left) == (0, None, 0)


def test_a_cut_length_prefix_says_where_and_what_was_left() -> None:
    buffer = struct.pack("<I", 1) + b"a" + b"\x02\x00"
    with pytest.raises(BytesLayoutError,
                       match=r"^BYTES buffer ends inside an element's length prefix$") as caught:
        bytes_elements(buffer, None, bytes)
    err = caught.value
    assert isinstance(err, ValueError)
    assert (err.index, err.offset, err.declared, err.left, err.items) == (1, 5, None, 2, [b"a"])


def test_an_element_past_the_end_says_what_it_declared_and_what_was_left() -> None:
    buffer = struct.pack("<I", 1) + b"a" + struct.pack("<I", 9) + b"bcd"
    for count in (None, 2):
        with pytest.raises(BytesLayoutError, match=r"^BYTES buffer ends inside an element$") \
                as caught:
            bytes_elements(buffer, count)
        err = caught.value
        assert (err.index, err.offset, err.declared, err.left, err.items) == \
            (1, 5, 9, 3, [(4, 5)])
    with pytest.raises(BytesLayoutError) as caught:
        bytes_elements(struct.pack("<I", 0xFFFFFFFF))
    assert (caught.value.index, caught.value.declared, caught.value.left) == (0, 0xFFFFFFFF, 0)
