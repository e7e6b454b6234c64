"""Where a client's HTTP/2 byte stream stands, for the timeouts zttp cannot see: within
a frame (a frame header or payload not whole yet), within a header block (HEADERS
without END_HEADERS, until the CONTINUATION that ends it). zttp buffers both silently;
this reads only the 9-byte frame headers, a few per call.
"""

from __future__ import annotations

PREFACE_BYTES = 24  # b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" (RFC 9113 3.4)
_HEADER_BYTES = 9
_HEADERS, _PUSH_PROMISE, _CONTINUATION = 0x1, 0x5, 0x9
_END_HEADERS = 0x4


class FrameScanner:
    """Frame boundaries of the bytes a server reads (after the client's preface)."""

    __slots__ = ("_preface", "_head", "_left", "in_header_block")

    def __init__(self) -> None:
        self._preface = PREFACE_BYTES  # preface bytes still to come
        self._head = b""  # a frame header not whole yet
        self._left = 0  # payload bytes of the current frame still to come
        self.in_header_block = False

    @property
    def in_frame(self) -> bool:
        """A frame (or the preface) has begun and is not whole."""
        return bool(self._head) or self._left > 0 or 0 < self._preface < PREFACE_BYTES

    def feed(self, data: bytes) -> None:
        pos, size = 0, len(data)
        if self._preface:
            pos = min(self._preface, size)
            self._preface -= pos
        while pos < size:
            if self._left:
                take = min(self._left, size - pos)
                self._left -= take
                pos += take
                continue
            take = min(_HEADER_BYTES - len(self._head), size - pos)
            head = self._head = self._head + data[pos:pos + take]
            pos += take
            if len(head) < _HEADER_BYTES:
                break
            kind = head[3]
            if kind in (_HEADERS, _PUSH_PROMISE, _CONTINUATION):
                self.in_header_block = not head[4] & _END_HEADERS
            self._left = int.from_bytes(head[:3], "big")
            self._head = b""
