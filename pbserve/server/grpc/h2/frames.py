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
        left = self._left
        if self._head:  # a frame header begun in an earlier read
            take = min(_HEADER_BYTES - len(self._head), size - pos)
            head = self._head = self._head + data[pos:pos + take]
            pos += take
            if len(head) < _HEADER_BYTES:
                return
            self._header(head[3], head[4])
            left = (head[0] << 16) | (head[1] << 8) | head[2]
            self._head = b""
        while True:
            if left:
                take = min(left, size - pos)
                left -= take
                pos += take
            if pos >= size:
                break
            if size - pos < _HEADER_BYTES:
                self._head = data[pos:]
                break
            kind = data[pos + 3]
            if kind == _HEADERS or kind == _CONTINUATION or kind == _PUSH_PROMISE:
                self.in_header_block = not data[pos + 4] & _END_HEADERS
            left = (data[pos] << 16) | (data[pos + 1] << 8) | data[pos + 2]
            pos += _HEADER_BYTES
        self._left = left

    def _header(self, kind: int, flags: int) -> None:
        if kind == _HEADERS or kind == _CONTINUATION or kind == _PUSH_PROMISE:
            self.in_header_block = not flags & _END_HEADERS
