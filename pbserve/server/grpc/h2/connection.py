"""One client connection of the gRPC server on zttp: HTTP/2 streams to calls.

zttp (a sans-IO HTTP/2 engine with a Zig core) parses frames, keeps HPACK and flow
control, answers pings and settings, and parks response bytes past the client's window;
this protocol maps each stream to a call of the servicer, runs it as a task on the event
loop, and writes what zttp has to send. A client that resets a stream cancels its task.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import zttp
from google.protobuf.message import DecodeError

from pbserve.server.grpc.h2.call import (
    ACCEPT_ENCODING,
    Abort,
    CallContext,
    Compressed,
    Deframer,
    TooLarge,
    parse_timeout,
    prefix,
    request_stream,
    status_trailers,
)
from pbserve.server.grpc.h2.frames import END_STREAM, empty_data, window_update
from pbserve.server.grpc.h2.guard import ENHANCE_YOUR_CALM, Guard
from pbserve.server.grpc.h2.window import window_frames
from pbserve.server.grpc.wire import ResponseParts

if TYPE_CHECKING:
    from pbserve.server.grpc.h2.server import H2GrpcServer

log = logging.getLogger("pbserve.grpc")

_HEADERS = [(b"content-type", b"application/grpc"), (b"grpc-accept-encoding", ACCEPT_ENCODING)]
_OK = status_trailers(grpc.StatusCode.OK)
# zttp lets a client open at most 4,096 streams on one connection (its bound against
# rapid-reset floods, CVE-2023-44487; not configurable). Before that the server says a
# graceful GOAWAY: the client finishes its calls there and opens a new connection.
STREAMS_PER_CONNECTION = 4000
_LAST_STREAM = 2**31 - 1
# Request headers that are the transport's, not the call's metadata (as grpcio).
_NOT_METADATA = frozenset((b"content-type", b"te", b"grpc-timeout", b"grpc-encoding",
                           b"grpc-accept-encoding", b"host"))
SHUT_WAIT_S = 1.0  # how long a half-closed connection waits for the client's close
_SMALL = 64 * 1024  # a response up to this size is joined to its prefix: one send
_REFUSED = "the server is shutting down: it takes no new calls"
_FAILED = object()  # a call's work ended it with an error status
_WINDOW_FRAMES = window_frames()
_PIECE = 1 << 20  # a response's buffer larger than this goes out in pieces of this size
_DEADLINE = "Deadline Exceeded"  # grpc-core's words for a call past its grpc-timeout


class _Call:
    """One stream's call."""

    __slots__ = ("stream_id", "handler", "deframer", "messages", "queue", "task", "context",
                 "started", "done", "half_closed", "units", "read_at", "deadline")

    def __init__(self, stream_id: int, handler: Any, limit: int, encoding: str,
                 gatherer: Callable[[int], Any] | None = None) -> None:
        self.stream_id = stream_id
        self.handler = handler
        self.deframer = Deframer(limit, encoding, gatherer)
        self.messages: list[bytes] = []
        self.queue: asyncio.Queue | None = None  # a streaming call's requests
        self.task: asyncio.Task | None = None
        self.context: CallContext | None = None
        self.started = False  # response headers sent
        self.done = False  # answered, failed or reset: nothing more is sent
        self.half_closed = False  # the client has sent all it will
        self.units = 0  # its requests counted as pending (read, not answered)
        self.read_at = 0.0  # its last HEADERS or DATA
        self.deadline: asyncio.TimerHandle | None = None  # its grpc-timeout

    def discard(self) -> None:
        """The call is over: what its request gathered and no task took is given back
        (a message placed in shm: grpc/wire.py SplitRequest)."""
        self.deframer.discard()
        messages, self.messages = self.messages, []
        for message in messages:
            release = getattr(message, "release", None)
            if release is not None:
                release()


def _close(stream: zttp.Stream, trailers: list[tuple[bytes, bytes]], started: bool,
           half_closed: bool) -> None:
    """End a stream's response with its status: the trailers (the whole response,
    trailers only, when nothing was sent). If the client could still send (a stream it
    kept open, a request refused before its end), close the stream both ways too
    (RST_STREAM NO_ERROR, as grpc's servers do), so that no later end of the connection
    overrides the status the client has."""
    if started:
        stream.end_message(trailers)
    else:
        stream.send_response(200, _HEADERS + trailers, end_stream=True)
    if not half_closed:
        stream.reset(0)


class GrpcConnection(asyncio.Protocol):
    """An HTTP/2 connection serving GRPCInferenceService."""

    def __init__(self, server: H2GrpcServer) -> None:
        self._server = server
        self._calls: dict[int, _Call] = {}
        self._opened = 0
        self._going_away = False
        self._shut = False  # half-closed: nothing more is written
        self._writable: asyncio.Event | None = None  # while the write buffer is full
        self._guard = Guard(server.limits, time.monotonic())  # keeps the order of opening
        self._reading_paused = False  # back-pressure: events are left in zttp
        self._processing = False  # within _process
        # Large DATA payloads go past zttp (frames.py FrameScanner): the pieces of a read
        # that back-pressure held back, and the credit owed for the payloads taken.
        self._held: collections.deque[tuple] = collections.deque()
        self._taking = False  # within _take
        self._fed = False  # zttp was given bytes whose events are not taken yet
        self._credit: dict[int, int] = {}  # by stream; 0: the connection
        self.transport: asyncio.Transport | None = None

    # -- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment] - uvloop's is no subclass
        self._conn = zttp.Connection(zttp.SERVER, zttp.HTTP2)
        self._conn.initiate_connection()
        # the server's SETTINGS, then the larger receive windows (window.py)
        transport.write(self._conn.data_to_send() + _WINDOW_FRAMES)
        if not self._server.connections.admit(self):
            self._refuse_connection()
            return
        self._server.pending.add(self)
        self._flush()  # if the server is stopping: GOAWAY and close

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._server.pending.forget(self)
        for call in self._calls.values():
            call.discard()
            call.done = True
            call.units = 0
            if call.deadline is not None:
                call.deadline.cancel()
            if call.task is not None:
                call.task.cancel()
        self._calls.clear()
        if self._writable is not None:
            self._writable.set()

    def pause_writing(self) -> None:
        self._writable = asyncio.Event()

    def resume_writing(self) -> None:
        self._guard.waiting_since = None  # the client took some: the send clock restarts
        if self._writable is not None:
            self._writable.set()
            self._writable = None

    # -- back-pressure (pending.py) ---------------------------------------------------
    def pause_reading(self) -> None:
        """Take no more events (zttp keeps the bytes already read) and read no more."""
        if self.transport is not None and not self.transport.is_closing():
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Take the events zttp still holds, then read again (unless they paused it)."""
        if not self._reading_paused or self.transport is None \
                or self.transport.is_closing():
            return
        self._reading_paused = False
        self._restart_read_clocks()
        if not self._processing and not self._taking:
            self._process()
            self._take([])
        if not self._reading_paused and not self.transport.is_closing():
            self.transport.resume_reading()

    def _restart_read_clocks(self) -> None:
        """After a pause of the server's own making, the client's stalls count anew."""
        now = self._server.connections.now
        self._guard.read_at = now
        if self._guard.scanner.in_header_block:
            self._guard.header_at = now
        for call in self._calls.values():
            call.read_at = now

    def _request_done(self, call: _Call) -> None:
        """A streaming call's servicer answered one of its requests."""
        if call.units:
            call.units -= 1
            self._server.pending.give(self)

    def data_received(self, data: bytes) -> None:
        if self._shut:
            return  # refused, or closing: nothing more is taken
        pieces = self._guard.read(data, self._server.connections.now)
        if pieces is not None or self._held:
            self._take(pieces if pieces is not None else [("zttp", data)])
            return
        try:  # every byte zttp's (the common case)
            self._conn.receive_data(data)
        except zttp.ProtocolError as exc:
            self._failed(exc)
            return
        self._process()

    def _take(self, pieces: list[tuple]) -> None:
        """Hand a read's pieces on in order, after any held back: zttp's to zttp, a large
        DATA payload to its call once the events of every byte before it are taken.
        What back-pressure stops stays held until reading resumes."""
        held = self._held
        held.extend(pieces)
        if self._taking:
            return  # (resumed from within): the loop below goes on with them
        self._taking = True
        try:
            while True:
                while held and not self._reading_paused and not self._shut:
                    piece = held.popleft()
                    if piece[0] == "zttp":
                        if not self._feed(piece[1]):
                            return
                        continue
                    if self._fed:
                        self._process()
                        if self._reading_paused:
                            held.appendleft(piece)
                            break
                    if not self._take_payload(*piece[1:]):
                        return
                if self._fed and not self._reading_paused and not self._shut:
                    self._process()
                if not held or self._reading_paused or self._shut:
                    break
        finally:
            self._taking = False
            if self._shut:
                held.clear()
        self._send_credit()

    def _take_payload(self, stream_id: int, payload: memoryview, flags: int,
                      done: bool) -> bool:
        """A large DATA payload taken past zttp: to its call, and credited; False when
        the connection failed."""
        call = self._calls.get(stream_id)
        live = call is not None and not call.done and not call.half_closed
        if live:
            self._on_data(call, payload)
        credit = self._credit
        credit[0] = credit.get(0, 0) + len(payload)
        end_stream = flags & END_STREAM
        if live and not end_stream:
            credit[stream_id] = credit.get(stream_id, 0) + len(payload)
        # zttp sees the frame, emptied, where its stream's state changes (END_STREAM) or
        # where it must judge the frame (a stream it does not serve); else it is skipped
        if done and (end_stream or not live):
            return self._feed(empty_data(stream_id, flags))
        return True

    def _feed(self, data: bytes) -> bool:
        """Bytes to zttp; False when they failed the connection."""
        try:
            self._conn.receive_data(data)
        except zttp.ProtocolError as exc:
            self._failed(exc)
            return False
        self._fed = True
        return True

    def _send_credit(self) -> None:
        """WINDOW_UPDATEs for the DATA payloads taken past zttp."""
        if not self._credit or self._shut or self.transport is None \
                or self.transport.is_closing():
            return
        credit, self._credit = self._credit, {}
        self.transport.write(b"".join(window_update(stream_id, n)
                                      for stream_id, n in credit.items() if n))

    def _process(self) -> None:
        """Act on zttp's events until it needs data, or back-pressure pauses reading."""
        conn = self._conn
        self._processing = True
        self._fed = False
        try:
            while not self._reading_paused:
                event = conn.next_event()
                kind = type(event)
                if kind is zttp.Data:
                    call = self._calls.get(event.stream_id)
                    if call is not None and not call.done:
                        self._on_data(call, event.data)
                elif kind is zttp.Request:
                    self._on_request(event)
                elif kind is zttp.EndOfMessage:
                    call = self._calls.get(event.stream_id)
                    if call is not None and not call.done:
                        self._on_end(call)
                elif kind is zttp.RstStream:
                    self._on_reset(event.stream_id)
                elif event is zttp.NEED_DATA:
                    break
                elif event is zttp.CONNECTION_CLOSED:
                    self.transport.close()
                    break
                elif kind is zttp.Ping or kind is zttp.Settings:
                    # zttp answers them; a client that reads none of the answers ends
                    if self._guard.control_frame(self._writable is not None):
                        self._calm(f"{type(event).__name__} flood: the client reads "
                                   f"none of the answers")
                        return
                elif kind is zttp.WindowUpdate:
                    self._guard.waiting_since = None  # credit: the send clock restarts
                # GoAway: zttp acts on it itself
        except zttp.ProtocolError as exc:
            self._failed(exc)
            return
        finally:
            self._processing = False
        self._flush()

    def _failed(self, exc: zttp.ProtocolError) -> None:
        log.info("gRPC connection from %s closed: %s",
                 self.transport.get_extra_info("peername"), exc)
        self._flush()  # zttp's GOAWAY
        self.transport.close()

    # -- requests ---------------------------------------------------------------------
    def _on_request(self, request: zttp.Request) -> None:
        stream_id = request.stream_id
        self._opened += 1
        if self._opened >= STREAMS_PER_CONNECTION:
            self.go_away()
        path = request.path.decode("latin-1")
        handler = self._server.handlers.get(path)
        if self._server.closing:  # a call sent before the client saw the GOAWAY
            self._trailers_only(request, grpc.StatusCode.UNAVAILABLE, _REFUSED)
            return
        if handler is None:
            self._trailers_only(request, grpc.StatusCode.UNIMPLEMENTED,
                                f"Method not found: {path}")
            return
        encoding = "identity"
        metadata = []
        timeout = None
        for name, value in request.headers:
            if name == b"grpc-encoding":
                encoding = value.decode("latin-1")
            elif name == b"grpc-timeout":
                timeout = parse_timeout(value)
            elif name not in _NOT_METADATA and not name.startswith(b":"):
                metadata.append((name.decode("latin-1"), value.decode("latin-1")))
        call = self._calls[stream_id] = _Call(stream_id, handler, self._server.limit,
                                              encoding, self._server.gatherers.get(path))
        call.context = CallContext(tuple(metadata),
                                   lambda message: self._send_message(call, message),
                                   handler.response_serializer,
                                   lambda: self._request_done(call))
        call.read_at = self._server.connections.now
        self._guard.idle_since = None
        if timeout is not None:  # as grpc-core: the call ends when its deadline passes
            call.deadline = asyncio.get_running_loop().call_later(
                timeout, self._deadline_passed, call)
        if handler.stream_stream is not None:
            call.queue = asyncio.Queue()
            call.task = asyncio.ensure_future(self._run_streaming(call))
        if request.end_stream:
            self._on_end(call)

    def _on_data(self, call: _Call, data: bytes) -> None:
        call.read_at = self._server.connections.now
        try:
            messages = call.deframer.feed(data)
        except TooLarge as exc:
            self._refuse(call, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            return
        except Compressed as exc:
            self._refuse(call, grpc.StatusCode.UNIMPLEMENTED, str(exc))
            return
        except DecodeError as exc:  # a gatherer's: the message is not what it says
            self._refuse(call, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            return
        if call.queue is None:
            call.messages.extend(messages)
            return
        if not messages:
            return
        deserialize = call.handler.request_deserializer
        for message in messages:
            call.queue.put_nowait(deserialize(message) if deserialize else message)
        call.units += len(messages)
        self._server.pending.take(self, len(messages))

    def _on_end(self, call: _Call) -> None:
        call.half_closed = True
        if call.queue is not None:
            call.queue.put_nowait(None)  # the client half-closed
            return
        if len(call.messages) != 1:
            self._refuse(call, grpc.StatusCode.INTERNAL,
                         f"a unary call takes one request message ({len(call.messages)} "
                         f"received)")
            return
        call.units = 1
        self._server.pending.take(self)
        call.task = asyncio.ensure_future(self._run_unary(call, call.messages.pop()))

    def _on_reset(self, stream_id: int) -> None:
        call = self._calls.get(stream_id)
        if call is not None:
            self._forget(call)
            if call.task is not None:
                call.task.cancel()  # the client cancelled (or its deadline passed)

    def _deadline_passed(self, call: _Call) -> None:
        """grpc-timeout: the call ends DEADLINE_EXCEEDED and its work is cancelled,
        whether or not the client resets the stream."""
        call.deadline = None
        task = call.task
        self._end(call, grpc.StatusCode.DEADLINE_EXCEEDED, _DEADLINE)
        if task is not None:
            task.cancel()

    # -- calls ------------------------------------------------------------------------
    async def _run_unary(self, call: _Call, body: bytes) -> None:
        payload = await self._guarded(call, self._unary(call, body))
        if payload is not _FAILED:
            self._answer(call, payload)

    async def _run_streaming(self, call: _Call) -> None:
        assert call.queue is not None and call.context is not None
        work = call.handler.stream_stream(request_stream(call.queue), call.context)
        if await self._guarded(call, work) is not _FAILED:
            self._end(call, call.context.code, call.context.details)

    @staticmethod
    async def _unary(call: _Call, body: bytes) -> Any:
        handler = call.handler
        deserialize, serialize = handler.request_deserializer, handler.response_serializer
        response = await handler.unary_unary(deserialize(body) if deserialize else body,
                                             call.context)
        return serialize(response) if serialize else response

    async def _guarded(self, call: _Call, work: Awaitable[Any]) -> Any:
        """What `work` returns, or _FAILED once the call has ended with the status of
        what it raised (as grpcio: an abort's, CANCELLED, UNKNOWN for the unexpected)."""
        try:
            return await work
        except Abort as abort:
            self._end(call, abort.code, abort.details)
        except asyncio.CancelledError:
            self._end(call, grpc.StatusCode.CANCELLED, "Cancelled")
            raise
        except Exception as exc:  # noqa: BLE001 - as grpcio: the call ends UNKNOWN
            log.error("gRPC call failed", exc_info=exc)
            self._end(call, grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")
        return _FAILED

    def _answer(self, call: _Call, payload: bytes | ResponseParts) -> None:
        """A unary call's response and its OK status, in one write."""
        try:
            if not call.done:
                stream = self._conn.stream(call.stream_id)
                stream.send_response(200, _HEADERS)
                if type(payload) is ResponseParts:
                    stream.send_data(prefix(payload.size))
                    for part in payload.parts:  # zttp copies each (from shm, for outputs)
                        self._send_body(stream, part)
                else:
                    self._data(stream, payload)
                stream.end_message(_OK)
        except zttp.ProtocolError:
            pass  # the stream is gone (the connection failed)
        finally:
            if type(payload) is ResponseParts:
                payload.release()
        self._forget(call)
        self._flush()

    def _send_body(self, stream: zttp.Stream, data: Any) -> None:
        """Response bytes to zttp, which copies them; a buffer larger than _PIECE is
        handed over and written out a piece at a time, so that the client reads the
        first while the server still copies the rest."""
        if len(data) <= _PIECE:
            stream.send_data(data)
            return
        view = memoryview(data)
        for at in range(0, len(view), _PIECE):
            stream.send_data(view[at:at + _PIECE])
            self._flush()

    def _send_message(self, call: _Call, payload: bytes) -> Any:
        """One message of a streaming response (CallContext.write); waits while the
        transport's buffer is full."""
        if not call.done:
            try:
                stream = self._conn.stream(call.stream_id)
                if not call.started:
                    stream.send_response(200, _HEADERS)
                    call.started = True
                self._data(stream, payload)
            except zttp.ProtocolError:
                self._forget(call)  # the stream is gone: the rest of the call is dropped
            self._flush()
        return self._writable.wait() if self._writable is not None else None

    def _end(self, call: _Call, code: grpc.StatusCode, details: str) -> None:
        """End the call with a status (trailers; trailers only when nothing was sent)."""
        if call.done:
            return
        try:
            _close(self._conn.stream(call.stream_id), status_trailers(code, details),
                   call.started, call.half_closed)
        except zttp.ProtocolError:
            pass  # the stream is gone (the connection failed)
        self._forget(call)
        self._flush()

    def _refuse(self, call: _Call, code: grpc.StatusCode, details: str) -> None:
        """End a call whose request cannot be taken (the client, if still sending, is
        told to stop: _end resets the stream)."""
        task = call.task
        self._end(call, code, details)
        if task is not None:
            task.cancel()

    def _trailers_only(self, request: zttp.Request, code: grpc.StatusCode,
                       details: str) -> None:
        """Refuse a call at its headers (and stop the client's sending, if any)."""
        _close(self._conn.stream(request.stream_id), status_trailers(code, details),
               started=False, half_closed=request.end_stream)

    def _forget(self, call: _Call) -> None:
        call.discard()
        call.done = True
        if self._calls.pop(call.stream_id, None) is not None and not self._calls:
            self._guard.idle_since = self._server.connections.now
        if call.units:
            self._server.pending.give(self, call.units)
            call.units = 0
        if call.deadline is not None:
            call.deadline.cancel()
            call.deadline = None

    def _data(self, stream: zttp.Stream, payload: bytes) -> None:
        """One whole message (a unary answer serialized at once, a stream's response)."""
        if len(payload) <= _SMALL:
            stream.send_data(prefix(len(payload)) + payload)
        else:  # zttp copies it into its buffer: no need to join it to the prefix first
            stream.send_data(prefix(len(payload)))
            self._send_body(stream, payload)

    def _flush(self) -> None:
        transport = self.transport
        if transport is None or self._shut or transport.is_closing():
            return
        out = self._conn.data_to_send()
        if out:
            transport.write(out)
        if self._writable is not None or self._conn.has_pending_send():
            if self._guard.waiting_since is None:  # responses wait for the client
                self._guard.waiting_since = self._server.connections.now
        else:
            self._guard.waiting_since = None
        if self._server.closing and not self._calls:
            self.close_idle(at_once=False)

    # -- timeouts and the connection cap (called by the ConnectionSet) ------------------
    @property
    def idle_since(self) -> float | None:
        """When its last call ended (None while calls run)."""
        return None if self._shut else self._guard.idle_since

    def expire(self, now: float) -> None:
        """Close the connection, or end a call, that waited longer than GrpcLimits
        allow: idle (a graceful GOAWAY), a header block or frame that stopped arriving, a
        client that takes no response (GOAWAY ENHANCE_YOUR_CALM); a call whose request
        message stopped arriving ends CANCELLED."""
        transport = self.transport
        if transport is None or self._shut or transport.is_closing():
            return
        reason = self._guard.expired(now, self._reading_paused)
        if reason == "idle":
            self.close_idle()
            return
        if reason:
            self._calm(reason)
            return
        timeout = self._guard.limits.body_timeout_s
        if not timeout or self._reading_paused:  # the server stopped reading, not they
            return
        for call in list(self._calls.values()):
            reading = not call.half_closed and (call.queue is None
                                                or call.deframer.in_message)
            if reading and now - call.read_at > timeout:
                self._refuse(call, grpc.StatusCode.CANCELLED,
                             f"no request message data received for {timeout:g} s")

    def _calm(self, reason: str) -> None:
        """End the connection for abuse or a timeout: GOAWAY ENHANCE_YOUR_CALM, then
        close; at once (the send buffer dropped) when the client reads nothing."""
        transport = self.transport
        log.info("gRPC connection from %s closed: %s", transport.get_extra_info("peername"),
                 reason)
        try:
            self._conn.close(ENHANCE_YOUR_CALM)
            transport.write(self._conn.data_to_send())
        except zttp.ProtocolError:
            pass
        if self._writable is not None or self._guard.waiting_since is not None:
            transport.abort()
        else:
            self.shut()

    def _refuse_connection(self) -> None:
        """Past the connection cap with no idle connection to close: GOAWAY
        ENHANCE_YOUR_CALM (the client's calls fail UNAVAILABLE) and close."""
        connections = self._server.connections
        connections.errors.line(
            logging.WARNING, "grpc-refused",
            f"gRPC connection from {self.transport.get_extra_info('peername')} refused: "
            f"the server holds as many connections as it accepts "
            f"({connections.max_connections}, --grpc-max-connections)")
        self._conn.close(ENHANCE_YOUR_CALM, 0)
        self.transport.write(self._conn.data_to_send())
        self._shut = True
        self.transport.close()  # at once: its descriptor is what the cap keeps free

    # -- shutdown ---------------------------------------------------------------------
    def go_away(self) -> None:
        """Take no new calls (a graceful GOAWAY); those in progress finish."""
        if not self._going_away:
            self._going_away = True
            self._conn.close(0, _LAST_STREAM)
            self._flush()

    def close_idle(self, at_once: bool = True) -> None:
        """The server stops: once no call runs here, GOAWAY (naming the last stream
        taken) and close. Until then the calls finish undisturbed: a GOAWAY while a
        stream still has its trailers to come made grpc's client lose them now and then.
        `at_once` (an idle connection past its timeout, or making room under the cap):
        closed after the GOAWAY is written, so that its descriptor is free at once;
        otherwise (the server stops) half-closed first (`shut`)."""
        if self._calls or self.transport is None or self._shut \
                or self.transport.is_closing():
            return
        self._going_away = True
        try:
            self._conn.close(0)
        except zttp.ProtocolError:
            pass  # the connection failed: nothing to say
        out = self._conn.data_to_send()
        if out:
            self.transport.write(out)
        if at_once:
            self._shut = True
            self.transport.close()
        else:
            self.shut()

    def shut(self) -> None:
        """Close after what was written: half-close (FIN) and let the client close its
        end. Closing at once could reset the connection (the client's late frames
        unread) and lose the last trailers the client has not read yet."""
        transport = self.transport
        if transport is None or self._shut or transport.is_closing():
            return
        self._shut = True
        if transport.can_write_eof():
            try:
                transport.write_eof()
            except OSError:  # the client is gone already
                transport.close()
                return
            asyncio.get_running_loop().call_later(SHUT_WAIT_S, transport.close)
        else:
            transport.close()

    @property
    def tasks(self) -> list[asyncio.Task]:
        return [call.task for call in self._calls.values() if call.task is not None]

    @property
    def idle(self) -> bool:
        return not self._calls
