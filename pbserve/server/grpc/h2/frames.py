"""The frames of a client's HTTP/2 byte stream, read at their 9-byte headers, for what
zttp does not do or does slowly (FrameScanner):

- the timeouts zttp cannot see: whether the stream stands within a frame (a frame header
  or payload not whole yet), or within a header block (HEADERS without END_HEADERS,
  until the CONTINUATION that ends it). zttp buffers both silently.
- large DATA payloads, taken past zttp. zttp copies what it reads several times over
  (about 10 ms of a 16 MiB request on this VM) and takes frames of at most 16 KiB, so a
  large message is a thousand frames of it; an empty DATA frame costs it next to nothing.
"""

from __future__ import annotations

PREFACE_BYTES = 24  # b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" (RFC 9113 3.4)
_HEADER_BYTES = 9
_DATA, _HEADERS, _PUSH_PROMISE, _WINDOW_UPDATE, _CONTINUATION = 0x0, 0x1, 0x5, 0x8, 0x9
END_STREAM, _END_HEADERS, _PADDED = 0x1, 0x4, 0x8
# A DATA frame at least this long has its payload taken past zttp.
BYPASS_MIN_BYTES = 4096


class FrameScanner:
    """Frame boundaries of the bytes a server reads (after the client's preface).

    `feed` passes every frame to zttp as it came (("zttp", bytes) pieces, in wire
    order), except the payload of an unpadded DATA frame of BYPASS_MIN_BYTES or more: it
    comes out as ("data", stream_id, view, flags, done) pieces (`done`: the frame's last
    piece), for the server to deliver and to credit itself (zttp credits only what it
    reads). A frame header split between two reads is held back until it is whole. A
    read that is zttp's whole (small frames: the common case) gives None.
    """

    __slots__ = ("_preface", "_head", "_left", "_bypass", "_stream", "_flags",
                 "in_header_block")

    def __init__(self) -> None:
        self._preface = PREFACE_BYTES  # preface bytes still to come
        self._head = b""  # a frame header not whole yet
        self._left = 0  # payload bytes of the current frame still to come
        self._bypass = False  # the current frame's payload goes past zttp
        self._stream = 0  # ... on this stream
        self._flags = 0  # ... with these flags
        self.in_header_block = False

    @property
    def in_frame(self) -> bool:
        """A frame (or the preface) has begun and is not whole."""
        return bool(self._head) or self._left > 0 or 0 < self._preface < PREFACE_BYTES

    def feed(self, data: bytes) -> list[tuple] | None:
        out: list[tuple] = []
        size = len(data)
        pos = start = 0  # start: where the zttp bytes not yet handed out begin
        if self._preface:
            pos = min(self._preface, size)
            self._preface -= pos
        while pos < size:
            if self._left:
                take = min(self._left, size - pos)
                self._left -= take
                if self._bypass:
                    if start < pos:
                        out.append(("zttp", data[start:pos]))
                    done = not self._left
                    out.append(("data", self._stream, memoryview(data)[pos:pos + take],
                                self._flags, done))
                    self._bypass = not done
                    start = pos + take
                pos += take
                continue
            if self._head or size - pos < _HEADER_BYTES:  # a header across two reads
                if start < pos:
                    out.append(("zttp", data[start:pos]))
                piece = data[pos:pos + _HEADER_BYTES - len(self._head)]
                self._head += piece
                pos = start = pos + len(piece)
                if len(self._head) < _HEADER_BYTES:
                    break
                head, self._head = self._head, b""
                if not self._frame(head):
                    out.append(("zttp", head))
                continue
            if self._frame(data[pos:pos + _HEADER_BYTES]):
                if start < pos:
                    out.append(("zttp", data[start:pos]))
                start = pos + _HEADER_BYTES
            pos += _HEADER_BYTES
        if not out and start == 0 and not self._head:
            return None
        if start < size:
            out.append(("zttp", data[start:size]))
        return out

    def _frame(self, head: bytes) -> bool:
        """A frame begins: whether its payload goes past zttp."""
        self._left = length = (head[0] << 16) | (head[1] << 8) | head[2]
        kind, flags = head[3], head[4]
        if kind == _HEADERS or kind == _CONTINUATION or kind == _PUSH_PROMISE:
            self.in_header_block = not flags & _END_HEADERS
        if kind != _DATA or length < BYPASS_MIN_BYTES or flags & _PADDED:
            return False
        self._bypass = True
        self._stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        self._flags = flags
        return True


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame as the server writes it: 24-bit length, type, flags, stream, payload."""
    return (len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big")
            + payload)


def empty_data(stream: int, flags: int) -> bytes:
    """A DATA frame with no payload on `stream`, with `flags`' END_STREAM."""
    return frame(_DATA, flags & END_STREAM, stream)


def window_update(stream: int, increment: int) -> bytes:
    """A WINDOW_UPDATE frame crediting `increment` bytes on `stream` (0: the connection)."""
    return frame(_WINDOW_UPDATE, 0, stream, increment.to_bytes(4, "big"))
