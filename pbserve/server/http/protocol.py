"""One HTTP/1.1 connection: an asyncio.Protocol over the `httptools` parser.

Chosen over uvicorn/aiohttp by measurement (docs/http_stack.md): the protocol does
only what KServe clients need (keep-alive, pipelining in order, Content-Length and
chunked bodies, `Expect: 100-continue`, chunked replies for server-sent events) and
nothing per request that the infer path does not use.

Requests of one connection are handled one at a time, in order (HTTP/1.1 replies
must keep the order of pipelined requests). Reply buffers may be views on shared
memory: `HttpReply.on_sent` runs only once the transport no longer holds them
(its write buffer drained) or the connection is gone.
"""

from __future__ import annotations

import asyncio
import collections
import http
import logging
import time
from collections.abc import Awaitable, Callable

import httptools

from pbserve.core.api import InputPlacer
from pbserve.core.observability.log_settings import SERVER_LOG
from pbserve.server import request_log
from pbserve.server.connections import ConnectionSet
from pbserve.server.http.limits import JSON_LENGTH_HEADER, body_limit, too_large_message
from pbserve.server.http.messages import HttpReply, HttpRequest, HttpStreamReply, message_reply
from pbserve.server.http.placed_body import PLACE_MIN_BYTES, PlacedBody

log = logging.getLogger("pbserve.http")

Handler = Callable[[HttpRequest], Awaitable["HttpReply | HttpStreamReply"]]
# Where a large infer body's tensors may be gathered (the core's `input_placer`).
Placer = Callable[[], "InputPlacer | None"]

# Replies up to this size are joined into one buffer (one write, one syscall); larger
# ones are written buffer by buffer so that big tensors are not copied again.
JOIN_LIMIT = 256 * 1024
# Bodies larger than this (by Content-Length) are gathered into one growing buffer as
# they arrive rather than kept as a list of chunks and joined at the end.
GATHER_LIMIT = 1024 * 1024
# Stop reading from a client that pipelines more than this many requests ahead.
MAX_PENDING = 32
# A request line and headers longer than this get 431 and the connection is closed (KServe
# heads are small: tensors and their JSON header travel in the body).
MAX_HEAD = 64 * 1024
# After answering a request it will not read (malformed, too large), the connection sends
# its FIN and reads no more; it is closed this much later. Closing at once, with the
# client's unread bytes in the socket, would reset the connection, and a reset can destroy
# the answer before the client has read it.
LINGER_S = 1.0

_STATUS_LINES = {
    int(s): b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in http.HTTPStatus
}
_STATUS_LINES[499] = b"HTTP/1.1 499 Client Closed Request\r\n"


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else b"HTTP/1.1 %d Unknown\r\n" % status


def render_head(status: int, content_type: bytes | None,
                headers: tuple | list, length: int | None, keep_alive: bool) -> bytes:
    """Status line and headers; `length` None means a chunked body."""
    parts = [status_line(status)]
    if content_type is not None:
        parts.append(b"Content-Type: %s\r\n" % content_type)
    for name, value in headers:
        parts.append(b"%s: %s\r\n" % (name, value))
    if length is None:
        parts.append(b"Transfer-Encoding: chunked\r\n")
    else:
        parts.append(b"Content-Length: %d\r\n" % length)
    if not keep_alive:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


class _Rejected(Exception):
    """Raised in a parser callback to stop parsing a request that gets `status` instead."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Body:
    """The body of the request being parsed: a list of chunks, or one bytearray grown
    as the data arrives when Content-Length says it is large. Never allocated ahead of
    the data, so a head claiming gigabytes costs nothing until they come; growing (a
    realloc that remaps pages) measured no slower than filling a zeroed buffer."""

    __slots__ = ("buffer", "chunks")

    def __init__(self, content_length: int) -> None:
        self.chunks: list[bytes] = []
        self.buffer = bytearray() if content_length > GATHER_LIMIT else None

    def add(self, chunk: bytes) -> None:
        if self.buffer is None:
            self.chunks.append(chunk)
        else:
            self.buffer += chunk

    def value(self) -> bytes | bytearray:
        if self.buffer is not None:
            return self.buffer
        chunks = self.chunks
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)


class _CountedBody(_Body):
    """A body of no announced length (chunked): the bytes received are counted against
    the limit, since no Content-Length could be checked before."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        super().__init__(0)
        self.limit = limit
        self.left = limit

    def add(self, chunk: bytes) -> None:
        self.left -= len(chunk)
        if self.left < 0:
            raise _Rejected(413, too_large_message(None, self.limit))
        self.chunks.append(chunk)


_NO_BODY = _Body(0)  # never added to: between requests, and after a rejected one


def _release(body: object) -> None:
    """Give back the shm blocks of a placed body (a no-op for any other)."""
    if type(body) is PlacedBody:
        body.release()


class HttpConnection(asyncio.Protocol):
    """Parses requests off the socket, hands each to `handler`, writes its reply."""

    def __init__(self, handler: Handler, connections: ConnectionSet,
                 placer: Placer | None = None) -> None:
        self._handler = handler
        self._placer = placer
        self._connections = connections
        self._limits = limits = connections.limits
        self._max_input = limits.max_input_size
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._in_head = False  # between a request's first byte and its headers' end
        self._in_body = False  # between a request's headers' end and its last byte
        self._head_bytes = 0
        # Times on the sweeper's clock (ConnectionSet.now, which lags by up to a round):
        # the last read (or the end of the last reply), and the start of the head being
        # read. Opening reads the clock itself, so that new connections keep their order.
        self._active_at = self._head_at = time.monotonic()
        self._body = _NO_BODY
        self._pending: collections.deque[tuple[HttpRequest, bool]] = collections.deque()
        self._task: asyncio.Task | None = None  # serves the connection's requests
        self._next: asyncio.Future | None = None  # what the task waits on between them
        self._reading_paused = False
        self._drained: asyncio.Future | None = None
        self._closing = False  # answered a request it will not read on: reads no more
        self.closed = False

    # --- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        # high=0: any data left in the transport's buffer pauses us, and resume_writing
        # comes exactly when it drained; that is when reply buffers may be released.
        transport.set_write_buffer_limits(high=0)  # type: ignore[attr-defined]
        if not self._connections.admit(self):
            self._refuse()

    def connection_lost(self, exc: Exception | None) -> None:
        """The client went away: what it was waiting for is cancelled (the backend drops
        a queued request and tells a running model through `is_cancelled()`)."""
        self.closed = True
        self._connections.discard(self)
        self._wake_drain()
        _release(self._body)
        self._body = _NO_BODY
        for request, _ in self._pending:
            _release(request.body)
        self._pending.clear()
        if self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        self._wake_drain()

    def data_received(self, data: bytes) -> None:
        self._active_at = self._connections.now
        in_head = self._in_head
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, "protocol upgrade is not supported")
            return
        except httptools.HttpParserError as exc:
            rejected = exc.__context__
            if isinstance(rejected, _Rejected):
                self._fail(rejected.status, rejected.message)
            else:
                self._fail(400, f"malformed HTTP request: {exc}")
            return
        # The parser keeps a head until it is complete: bound what one may hold. A chunk
        # counts when the head it continues is still open after it (one that starts a
        # head mid-chunk is not counted: it may be mostly the previous request's body).
        if in_head and self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD:
                self._fail(431, f"request line and headers exceed {MAX_HEAD} bytes")

    # --- httptools callbacks -------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._in_head = True
        self._head_at = self._active_at
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._in_body = True
        headers = self._headers
        length = headers.get(b"content-length")
        if length is None:
            self._body = _CountedBody(body_limit(self._max_input, headers))
        else:
            size = int(length) if length.isdigit() else 0
            if size > self._max_input:  # then the JSON header's share decides
                limit = body_limit(self._max_input, headers)
                if size > limit:
                    raise _Rejected(413, too_large_message(size, limit))
            self._body = self._placed_body(size) or _Body(size)
        if headers.get(b"expect", b"").lower() == b"100-continue":
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _placed_body(self, size: int) -> PlacedBody | None:
        """A large infer body, uncompressed, with a JSON header of its stated length,
        is gathered with its tensors straight into shm (placed_body.py)."""
        if size < PLACE_MIN_BYTES or self._placer is None:
            return None
        headers = self._headers
        header_size = headers.get(JSON_LENGTH_HEADER)
        if header_size is None or not header_size.isdigit() or b"content-encoding" in headers:
            return None
        header_size = int(header_size)
        if not 0 < header_size < size or self._parser.get_method() != b"POST" \
                or not self._url.partition(b"?")[0].endswith(b"/infer"):
            return None
        placer = self._placer()
        return PlacedBody(size, header_size, placer) if placer is not None else None

    def on_body(self, chunk: bytes) -> None:
        self._body.add(chunk)

    def on_message_complete(self) -> None:
        self._in_body = False
        path, _, query = self._url.partition(b"?")
        request = HttpRequest(self._parser.get_method(), path.decode("latin-1"), query,
                              self._headers, self._body.value())
        if SERVER_LOG.verbose:
            request_log.http_request(request.method, request.path)
        self._body = _NO_BODY
        self._pending.append((request, self._parser.should_keep_alive()))
        if self._next is not None:
            waiting, self._next = self._next, None
            waiting.set_result(None)
        elif self._task is None:
            self._task = self._loop.create_task(self._serve())
        elif len(self._pending) > MAX_PENDING and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()

    # --- serving ------------------------------------------------------------------

    @property
    def _serving(self) -> bool:
        """A request is being answered (or waits for the task): not between requests."""
        return self._task is not None and self._next is None

    async def _serve(self) -> None:
        """Handle the queued requests in order, then wait for the next one."""
        try:
            while True:
                try:
                    if not await self._serve_pending():
                        return
                finally:
                    self._active_at = self._head_at = self._connections.now
                if self.closed:
                    return
                self._next = self._loop.create_future()
                await self._next
        except Exception as exc:
            self._connections.errors.line(logging.ERROR, "reply", "HTTP connection failed "
                                          "while replying", exc_info=exc)
            self._transport.abort()
        finally:
            self._task = self._next = None

    async def _serve_pending(self) -> bool:
        """Answer the queued requests; False when the connection is to be closed."""
        while self._pending and not self.closed:
            request, keep_alive = self._pending.popleft()
            if self._reading_paused and len(self._pending) <= MAX_PENDING // 2:
                self._reading_paused = False
                self._transport.resume_reading()
            try:
                reply = await self._call_handler(request)
            finally:
                _release(request.body)  # the blocks of a placed body no request took
            if isinstance(reply, HttpStreamReply):
                await self._send_stream(reply, keep_alive)
            else:
                await self._send(reply, keep_alive)
            if self._drained is not None:  # a peer that reads slowly: no reply ahead
                await self._drain()
            if not keep_alive:
                self._transport.close()
                return False
        return True

    async def _call_handler(self, request: HttpRequest) -> HttpReply | HttpStreamReply:
        try:
            return await self._handler(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._connections.errors.line(
                logging.ERROR, type(exc).__name__,
                f"HTTP {request.method.decode()} {request.path[:200]} failed", exc_info=exc)
            return message_reply(500, "internal server error")

    async def _send(self, reply: HttpReply, keep_alive: bool) -> None:
        try:
            if self.closed:
                return
            body = reply.body
            length = 0
            for part in body:
                length += len(part)
            head = render_head(reply.status, reply.content_type, reply.headers, length,
                               keep_alive)
            transport = self._transport
            if length <= JOIN_LIMIT:
                transport.write(b"".join((head, *body)) if body else head)
            else:
                transport.write(head)
                for part in body:
                    transport.write(part)
                if reply.on_sent is not None:
                    await self._drain()
        finally:
            if reply.on_sent is not None:
                reply.on_sent()

    async def _send_stream(self, reply: HttpStreamReply, keep_alive: bool) -> None:
        chunks = reply.chunks
        try:
            if self.closed:
                return
            self._transport.write(render_head(reply.status, reply.content_type, (), None,
                                              keep_alive))
            async for chunk in chunks:
                if self.closed:
                    return
                self._transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                if self._drained is not None:
                    await self._drain()
            if not self.closed:
                self._transport.write(b"0\r\n\r\n")
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]

    async def _drain(self) -> None:
        """Wait until the transport holds none of our buffers (or the peer is gone)."""
        while self._drained is not None and not self.closed:
            await self._drained

    def _wake_drain(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _fail(self, status: int, message: str) -> None:
        """A request we will not read on (unparsable, too large, too slow): what it
        buffered is dropped, and the connection answers it and closes. The answer goes
        out unless a reply is still ahead of it; then the connection closes at once."""
        _release(self._body)
        self._body = _NO_BODY
        self._headers = {}
        if self._closing or self.closed:
            return
        self._closing = True
        self._log_refusal(status, message)
        transport = self._transport
        if self._serving:
            transport.close()
            return
        self._write_error(status, message)
        if transport.can_write_eof():
            transport.write_eof()
        transport.pause_reading()
        self._loop.call_later(LINGER_S, transport.close)

    # --- timeouts and the connection cap (called by the ConnectionSet) ---------------

    @property
    def idle_since(self) -> float | None:
        """When it went idle: no request being read or answered (None: busy)."""
        if self._serving or self._in_head or self._in_body or self._closing:
            return None
        return self._active_at

    def expire(self, now: float) -> None:
        """Close the connection if what it waits for took too long: the rest of a head,
        the next bytes of a body (408), a next request (closed without a word)."""
        if self._serving or self._closing or self.closed:
            return
        limits = self._limits
        if self._in_head:
            timeout = limits.header_timeout_s
            if timeout and now - self._head_at > timeout:
                self._fail(408, f"request head not received within {timeout:g} s")
        elif self._in_body:
            timeout = limits.body_timeout_s
            if timeout and now - self._active_at > timeout:
                self._fail(408, f"no request body data received for {timeout:g} s")
        else:
            timeout = limits.keepalive_timeout_s
            if timeout and now - self._active_at > timeout:
                self.close_idle()

    def close_idle(self) -> None:
        self._closing = True
        self._transport.close()

    def _refuse(self) -> None:
        """Past the connection cap with no idle connection to close: 503 and close."""
        self._closing = True
        message = (f"the server holds as many connections as it accepts "
                   f"({self._connections.max_connections}, --http-max-connections): try "
                   f"again later")
        self._log_refusal(503, message)
        self._write_error(503, message)
        self._transport.close()

    def _write_error(self, status: int, message: str) -> None:
        reply = message_reply(status, message)
        self._transport.write(render_head(status, reply.content_type, (),
                                          sum(map(len, reply.body)), False))
        self._transport.writelines(reply.body)

    def _log_refusal(self, status: int, message: str) -> None:
        peer = self._transport.get_extra_info("peername")
        self._connections.errors.line(logging.WARNING, f"http-{status}",
                                      f"HTTP {status} to {peer}: {message}")

    # --- shutdown -----------------------------------------------------------------

    @property
    def idle(self) -> bool:
        return not self._serving

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._transport is not None:
            self._transport.abort()
