"""gRPC's length-prefixed messages (for transports that see raw HTTP/2 bodies)."""

from __future__ import annotations

import struct

_HEAD = struct.Struct(">BI")  # compressed flag, big-endian length


def frame(message: bytes) -> bytes:
    """One uncompressed length-prefixed message."""
    return _HEAD.pack(0, len(message)) + message


def frame_head(length: int) -> bytes:
    """The 5-byte prefix alone (to write a large message without joining it)."""
    return _HEAD.pack(0, length)


class Deframer:
    """Splits a byte stream into gRPC messages as chunks arrive."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Messages completed by `data` (compressed messages are refused)."""
        buf = self._buf
        buf += data
        out = []
        while len(buf) >= 5:
            flag, length = _HEAD.unpack_from(buf)
            if flag:
                raise ValueError("compressed gRPC messages are not supported")
            if len(buf) < 5 + length:
                break
            out.append(bytes(memoryview(buf)[5:5 + length]))
            del buf[:5 + length]
        return out
