"""A lean asyncio server on the `h2` library (h2 does the HTTP/2; this file only maps
streams to the echo, minds flow control and writes trailers)."""

from __future__ import annotations

import asyncio
from functools import partial

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RequestReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.settings import SettingCodes

from grpc_echo import echo
from grpc_echo.framing import Deframer, frame

_WINDOW = 2**31 - 1
_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]
_OK = [(b"grpc-status", b"0")]


class _Call:
    """One stream: its request messages in, its response bytes waiting for window."""

    __slots__ = ("path", "deframer", "requests", "out", "sent", "done", "streaming", "waiting")

    def __init__(self, path: str) -> None:
        self.path = path
        self.deframer = Deframer()
        self.requests: list[bytes] = []
        self.out: list[memoryview] = []
        self.sent = False
        self.done = False
        self.streaming = path == echo.STREAM_METHOD
        self.waiting = False  # a probe waiting for its cancellation


class EchoProtocol(asyncio.Protocol):
    """One HTTP/2 connection."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.conn = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        self.conn.initiate_connection()
        self.conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: _WINDOW,
                                   SettingCodes.MAX_FRAME_SIZE: 2**24 - 1})
        self.conn.increment_flow_control_window(_WINDOW - 65535)
        self.calls: dict[int, _Call] = {}
        transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        for event in conn.receive_data(data):
            if isinstance(event, DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                call = self.calls.get(event.stream_id)
                if call is not None:
                    echo.take(call, event.data, partial(self._send, event.stream_id, call))
            elif isinstance(event, RequestReceived):
                path = dict(event.headers)[b":path"].decode()
                self.calls[event.stream_id] = _Call(path)
            elif isinstance(event, StreamEnded):
                call = self.calls.get(event.stream_id)
                if call is not None:
                    self._on_end(event.stream_id, call)
            elif isinstance(event, WindowUpdated):
                self._flush_all() if event.stream_id == 0 else self._flush(event.stream_id)
            elif isinstance(event, StreamReset):
                call = self.calls.pop(event.stream_id, None)
                if call is not None and call.waiting:
                    echo.record("stream cancelled" if call.streaming else "call cancelled")
            elif isinstance(event, ConnectionTerminated):
                self.transport.close()
                return
        self.transport.write(conn.data_to_send())

    def _on_end(self, stream_id: int, call: _Call) -> None:
        if call.streaming:
            call.done = True
            self._flush(stream_id)
            return
        try:
            answer = echo.answer_unary(call.path, call.requests)
        except echo.Wait:
            call.waiting = True
            return
        except echo.Refused as error:
            self.conn.send_headers(stream_id, _HEADERS)
            self.conn.send_headers(stream_id, error.trailers(), end_stream=True)
            del self.calls[stream_id]
            return
        call.done = True
        self._send(stream_id, call, answer)

    def _send(self, stream_id: int, call: _Call, message: bytes) -> None:
        call.out.append(memoryview(frame(message)))
        self._flush(stream_id)

    def _flush(self, stream_id: int) -> None:
        call = self.calls.get(stream_id)
        if call is None or not (call.streaming or call.done):
            return
        conn = self.conn
        if not call.sent:
            conn.send_headers(stream_id, _HEADERS)
            call.sent = True
        limit = conn.max_outbound_frame_size
        while call.out:
            view = call.out[0]
            window = conn.local_flow_control_window(stream_id)
            if window <= 0:
                return
            n = min(len(view), window, limit)
            conn.send_data(stream_id, view[:n])
            if n == len(view):
                call.out.pop(0)
            else:
                call.out[0] = view[n:]
        if call.done:
            conn.send_headers(stream_id, _OK, end_stream=True)
            del self.calls[stream_id]

    def _flush_all(self) -> None:
        for stream_id in list(self.calls):
            if self.calls[stream_id].out:
                self._flush(stream_id)


def serve(port: int) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(EchoProtocol, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())
