"""grpclib (pure Python on h2) with a pass-through codec: `echo` does the protobuf work."""

from __future__ import annotations

import asyncio
from typing import Any

from grpclib.config import Configuration
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.encoding.base import CodecBase
from grpclib.server import Server, Stream

from grpc_echo import echo


class BytesCodec(CodecBase):
    """Messages stay bytes on both sides."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return message

    def decode(self, data: bytes, message_type: Any) -> Any:
        return data


async def _wait_for_cancel(what: str) -> None:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        echo.record(f"{what} cancelled")
        raise


class EchoService:
    """The RPCs as grpclib handlers."""

    def __mapping__(self) -> dict[str, Handler]:
        def unary(fn):
            async def call(stream: Stream) -> None:
                body = await stream.recv_message()
                try:
                    answer = fn(body)
                except echo.Wait:
                    return await _wait_for_cancel("call")
                except echo.Refused as error:
                    raise GRPCError(Status(error.status), error.message) from None
                await stream.send_message(answer)
            return Handler(call, Cardinality.UNARY_UNARY, bytes, bytes)

        async def stream_infer(stream: Stream) -> None:
            async for body in stream:
                try:
                    await stream.send_message(echo.stream_infer(body))
                except echo.Wait:
                    return await _wait_for_cancel("stream")

        mapping = {echo.PREFIX + m: unary(echo.unary_handler(m)) for m in echo.UNARY_METHODS}
        mapping[echo.STREAM_METHOD] = Handler(stream_infer, Cardinality.STREAM_STREAM,
                                              bytes, bytes)
        return mapping


def serve(port: int) -> None:
    import uvloop

    async def main() -> None:
        config = Configuration(http2_connection_window_size=2**31 - 1,
                               http2_stream_window_size=2**31 - 1)
        server = Server([EchoService()], codec=BytesCodec(), config=config)
        await server.start("127.0.0.1", port)
        await server.wait_closed()

    uvloop.run(main())
