"""Tensor buffers as both frontends hand them to their transports: a buffer's size in
bytes, and a view whose len() is that size."""

from __future__ import annotations


def nbytes(data: bytes | bytearray | memoryview) -> int:
    return data.nbytes if isinstance(data, memoryview) else len(data)


def byte_view(data: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
    """A buffer whose len() is its size in bytes, as transports and joins expect."""
    if isinstance(data, memoryview) and (data.ndim != 1 or data.itemsize != 1):
        return data.cast("B")
    return data
