"""A lean asyncio server on `zttp`'s sans-IO HTTP/2 (its Zig core does the framing, HPACK,
flow control and pings; this file only maps streams to the echo and writes trailers)."""

from __future__ import annotations

import asyncio
from functools import partial

import zttp

from grpc_echo import echo
from grpc_echo.framing import Deframer, frame
from pbserve.server.grpc.h2.window import window_frames

_HEADERS = [(b"content-type", b"application/grpc")]
_OK = [(b"grpc-status", b"0")]
# zttp lets a peer open at most 4,096 streams on one connection (its cap against rapid
# reset floods, CVE-2023-44487, not configurable): well before that the server says a
# graceful GOAWAY, so the client moves on to a new connection.
_STREAMS_PER_CONNECTION = 4000


class _Call:
    """One stream: its request messages in."""

    __slots__ = ("path", "deframer", "requests", "streaming", "started", "waiting")

    def __init__(self, path: str) -> None:
        self.path = path
        self.deframer = Deframer()
        self.requests: list[bytes] = []
        self.streaming = path == echo.STREAM_METHOD
        self.started = False
        self.waiting = False  # a probe waiting for its cancellation


class EchoProtocol(asyncio.Protocol):
    """One HTTP/2 connection."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.conn = zttp.Connection(zttp.SERVER, zttp.HTTP2)
        self.conn.initiate_connection()
        self.calls: dict[int, _Call] = {}
        self.opened = 0
        self.going_away = False
        # the receive window pbserve offers (pbserve/server/grpc/h2/window.py): the bare
        # transport's figure is zttp's as pbserve drives it
        transport.write(self.conn.data_to_send() + window_frames())

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        conn.receive_data(data)
        while True:
            event = conn.next_event()
            kind = type(event)
            if kind is zttp.Data:
                call = self.calls.get(event.stream_id)
                if call is not None:
                    echo.take(call, event.data, partial(self._send, event.stream_id, call))
            elif kind is zttp.Request:
                call = self.calls[event.stream_id] = _Call(event.path.decode())
                self.opened += 1
                if self.opened >= _STREAMS_PER_CONNECTION and not self.going_away:
                    self.going_away = True
                    conn.close(0, 2**31 - 1)  # no new streams; those in flight finish
                if event.end_stream:
                    self._on_end(event.stream_id, call)
            elif kind is zttp.EndOfMessage:
                call = self.calls.get(event.stream_id)
                if call is not None:
                    self._on_end(event.stream_id, call)
            elif kind is zttp.RstStream:
                call = self.calls.pop(event.stream_id, None)
                if call is not None and call.waiting:
                    echo.record("stream cancelled" if call.streaming else "call cancelled")
            elif event is zttp.NEED_DATA:
                break
            elif event is zttp.CONNECTION_CLOSED or kind is zttp.GoAway:
                self.transport.write(conn.data_to_send())
                self.transport.close()
                return
        out = conn.data_to_send()
        if out:
            self.transport.write(out)
        # After the GOAWAY the client closes the connection once its calls are done
        # (closing it here could cut requests it already sent: a TCP reset).

    def connection_lost(self, exc: Exception | None) -> None:
        self.calls.clear()

    def _on_end(self, stream_id: int, call: _Call) -> None:
        stream = self.conn.stream(stream_id)
        if call.streaming:
            self._start(stream, call)
            stream.end_message(_OK)
            del self.calls[stream_id]
            return
        try:
            answer = echo.answer_unary(call.path, call.requests)
        except echo.Wait:
            call.waiting = True
            return
        except echo.Refused as error:
            self._start(stream, call)
            stream.end_message(error.trailers())
            del self.calls[stream_id]
            return
        self._send(stream_id, call, answer)
        stream.end_message(_OK)
        del self.calls[stream_id]

    def _start(self, stream: zttp.Stream, call: _Call) -> None:
        if not call.started:
            stream.send_response(200, _HEADERS)
            call.started = True

    def _send(self, stream_id: int, call: _Call, message: bytes) -> None:
        stream = self.conn.stream(stream_id)
        self._start(stream, call)
        stream.send_data(frame(message))


def serve(port: int) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(EchoProtocol, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())
