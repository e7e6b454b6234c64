"""One gRPC call on an HTTP/2 stream: its request messages in (gRPC's length-prefixed
framing), and the part of grpc.aio.ServicerContext that pbserve's servicer uses.

The servicer (grpc/service.py, grpc/stream.py) was written against grpc.aio; this
context gives it the same surface (`abort`, `invocation_metadata`, `set_code`,
`set_details`, `write`), so one servicer serves both transports.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import grpc

PREFIX_BYTES = 5  # compressed flag (1 byte), message length (4 bytes, big-endian)
GATHER_MIN_BYTES = 64 * 1024  # a smaller message is buffered whole (Deframer's gatherer)
_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if c != 0x25)  # grpc-message's


class Abort(Exception):
    """`context.abort()`: the call ends with this status (as grpc.aio.AbortError)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


def status_trailers(code: grpc.StatusCode, details: str = "") -> list[tuple[bytes, bytes]]:
    """grpc-status and the percent-encoded grpc-message (the gRPC HTTP/2 spec)."""
    trailers = [(b"grpc-status", str(code.value[0]).encode())]
    if details:
        message = quote(details, safe=_SAFE)
        # A field value may not begin or end with a space (RFC 9113 8.2.1): grpc-core
        # drops such a trailer block and its client waits out its deadline. Triton's
        # shape error ends with ". ": its spaces at the ends go percent-encoded.
        inner = message.strip(" ")
        if inner != message:
            lead = len(message) - len(message.lstrip(" "))
            message = "%20" * lead + inner + "%20" * (len(message) - lead - len(inner))
        trailers.append((b"grpc-message", message.encode("ascii")))
    return trailers


def prefix(length: int) -> bytes:
    """The 5 bytes before an uncompressed message of `length` bytes."""
    return b"\x00" + length.to_bytes(4, "big")


class TooLarge(Exception):
    """A request message past the receive limit (grpcio's words and status)."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"Received message larger than max ({length} vs. {limit})")


class Compressed(Exception):
    """A compressed request message in an encoding the server does not take."""


# grpc-encoding -> zlib's wbits (gzip: a gzip header; deflate: zlib's format, as grpc's)
ENCODINGS = {"gzip": 31, "deflate": 15}
ACCEPT_ENCODING = ("identity," + ",".join(ENCODINGS)).encode()


class Deframer:
    """Request messages out of a stream's DATA; a message's size is checked against
    `limit` from its prefix, before its body is buffered, and a compressed one's
    (grpc-encoding `encoding`) again as it is inflated. A message split over DATA
    frames is copied into one buffer of its size as its pieces arrive (once, while the
    rest is still on its way), not joined when it is whole. `gatherer`, where given,
    takes an uncompressed message of GATHER_MIN_BYTES or more instead: `gatherer(length)`
    gives an object (or None to decline) that is fed the message's pieces (`feed`) and
    gives the message (`result()`); grpc/wire.py RequestGatherer places ModelInfer's
    tensors this way."""

    __slots__ = ("limit", "encoding", "_head", "_body", "_filled", "_compressed",
                 "_gatherer", "_gather", "_length")

    def __init__(self, limit: int, encoding: str = "identity",
                 gatherer: Callable[[int], Any] | None = None) -> None:
        self.limit = limit
        self.encoding = encoding
        self._head = b""  # a prefix not yet whole
        self._body: bytearray | None = None  # the message being gathered
        self._filled = 0
        self._compressed = False
        self._gatherer = gatherer
        self._gather: Any = None  # the gatherer of the message under way
        self._length = 0

    def feed(self, data: bytes) -> list[Any]:
        """The messages `data` completes (TooLarge, Compressed: the call must end;
        a gatherer's DecodeError too)."""
        if self._body is None and self._gather is None and not self._head and \
                len(data) >= PREFIX_BYTES:
            length = int.from_bytes(data[1:5], "big")
            if len(data) == PREFIX_BYTES + length and data[0] == 0 and length <= self.limit \
                    and (self._gatherer is None or length < GATHER_MIN_BYTES):
                return [bytes(data[PREFIX_BYTES:])]  # the common case: one whole message
        messages: list[Any] = []
        view = memoryview(data)
        pos, size = 0, len(data)
        while pos < size or (self._body is not None and not self._body):
            if self._body is None and self._gather is None:
                take = min(PREFIX_BYTES - len(self._head), size - pos)
                self._head += data[pos:pos + take]
                pos += take
                if len(self._head) < PREFIX_BYTES:
                    break
                self._start(self._head)
                self._head = b""
                if self._gather is not None:
                    continue
            if self._gather is not None:
                take = min(self._length - self._filled, size - pos)
                if take:
                    self._gather.feed(view[pos:pos + take])
                    self._filled += take
                    pos += take
                if self._filled == self._length:
                    messages.append(self._gather.result())
                    self._gather = None
                continue
            body = self._body
            assert body is not None
            take = min(len(body) - self._filled, size - pos)
            if take:
                body[self._filled:self._filled + take] = view[pos:pos + take]
                self._filled += take
                pos += take
            if self._filled == len(body):
                messages.append(self._inflate(body) if self._compressed else body)
                self._body = None
        return messages

    def discard(self) -> None:
        """The call ended: a message still being gathered is given up."""
        gather, self._gather = self._gather, None
        if gather is not None:
            gather.discard()

    @property
    def in_message(self) -> bool:
        """A message has begun (some of its prefix or body) and is not whole yet."""
        return self._body is not None or self._gather is not None or bool(self._head)

    def _start(self, head: bytes) -> None:
        self._compressed = head[0] != 0
        if self._compressed and self.encoding not in ENCODINGS:
            raise Compressed(f"a compressed message in grpc-encoding '{self.encoding}': "
                             f"the server takes {', '.join(ENCODINGS)}")
        length = int.from_bytes(head[1:5], "big")
        if length > self.limit:
            raise TooLarge(length, self.limit)
        self._filled = 0
        if self._gatherer is not None and not self._compressed and \
                length >= GATHER_MIN_BYTES:
            self._gather = self._gatherer(length)  # None: it declines, buffered whole
            self._length = length
        if self._gather is None:
            self._body = bytearray(length)

    def _inflate(self, message: bytes | bytearray) -> bytes:
        inflater = zlib.decompressobj(ENCODINGS[self.encoding])
        try:
            data = inflater.decompress(message, self.limit + 1)
        except zlib.error as exc:
            raise Compressed(f"the message does not inflate as {self.encoding}: "
                             f"{exc}") from None
        if len(data) > self.limit:
            raise TooLarge(len(data), self.limit)
        return data


# grpc-timeout's units (the gRPC over HTTP/2 spec: "Hour", "Minute", ... "Nanosecond")
_TIMEOUT_UNITS = {ord("H"): 3600.0, ord("M"): 60.0, ord("S"): 1.0, ord("m"): 1e-3,
                  ord("u"): 1e-6, ord("n"): 1e-9}


def parse_timeout(value: bytes) -> float | None:
    """A grpc-timeout header's seconds (1 to 8 digits and a unit); None if malformed
    (the call then has no deadline, as grpc-core ignores a bad one)."""
    if not value:
        return None
    unit, digits = _TIMEOUT_UNITS.get(value[-1]), value[:-1]
    if unit is None or not 0 < len(digits) <= 8 or not digits.isdigit():
        return None
    return int(digits) * unit


class CallContext:
    """What the servicer sees of its call (grpc.aio.ServicerContext's methods it uses),
    and `request_done`, by which a streaming call's servicer says it has answered one of
    the requests the transport counts as pending (pending.py)."""

    __slots__ = ("_metadata", "_send", "_serialize", "code", "details", "request_done")

    def __init__(self, metadata: tuple[tuple[str, str], ...],
                 send: Callable[[bytes], None],
                 serialize: Callable[[Any], bytes] | None,
                 request_done: Callable[[], None] | None = None) -> None:
        self._metadata = metadata
        self._send = send
        self._serialize = serialize
        self.code = grpc.StatusCode.OK
        self.details = ""
        self.request_done = request_done

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise Abort(code, details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    async def write(self, message: Any) -> None:
        """One response message of a streaming call."""
        waiting = self._send(self._serialize(message) if self._serialize else message)
        if waiting is not None:  # the connection's buffer is full: wait for it to drain
            await waiting


async def request_stream(queue: asyncio.Queue) -> AsyncIterator[Any]:
    """A client-streaming call's requests, as the transport puts them on `queue` (None
    ends them: the client half-closed)."""
    while True:
        message = await queue.get()
        if message is None:
            return
        yield message
