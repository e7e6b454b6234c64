"""grpcio's servers: asyncio (`grpc.aio`, on uvloop) and sync (a thread pool).

Generic handlers with bytes in and bytes out, so the protobuf work is `echo`'s, the same
as every other transport's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent import futures

import grpc

from grpc_echo import echo

_CODES = {code.value[0]: code for code in grpc.StatusCode}
OPTIONS = [("grpc.max_send_message_length", 2**31 - 1),
           ("grpc.max_receive_message_length", 2**31 - 1),
           ("grpc.so_reuseport", 0)]


async def _wait_for_cancel(what: str) -> None:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        echo.record(f"{what} cancelled")
        raise


def _aio_handlers() -> grpc.GenericRpcHandler:
    def unary(fn):
        async def call(body: bytes, context) -> bytes:
            try:
                return fn(body)
            except echo.Wait:
                await _wait_for_cancel("call")
            except echo.Refused as error:
                await context.abort(_CODES[error.status], error.message)
        return grpc.unary_unary_rpc_method_handler(call)

    async def stream(requests: AsyncIterator[bytes], _context) -> AsyncIterator[bytes]:
        async for body in requests:
            try:
                yield echo.stream_infer(body)
            except echo.Wait:
                await _wait_for_cancel("stream")

    methods = {m: unary(echo.unary_handler(m)) for m in echo.UNARY_METHODS}
    methods["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(stream)
    return grpc.method_handlers_generic_handler(echo.SERVICE, methods)


def _sync_handlers() -> grpc.GenericRpcHandler:
    def unary(fn):
        return grpc.unary_unary_rpc_method_handler(lambda body, _context: fn(body))

    def stream(requests: Iterator[bytes], _context) -> Iterator[bytes]:
        for body in requests:
            yield echo.stream_infer(body)

    methods = {m: unary(echo.unary_handler(m)) for m in echo.UNARY_METHODS}
    methods["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(stream)
    return grpc.method_handlers_generic_handler(echo.SERVICE, methods)


def serve_aio(port: int) -> None:
    import uvloop

    async def main() -> None:
        server = grpc.aio.server(options=OPTIONS)
        server.add_generic_rpc_handlers((_aio_handlers(),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    uvloop.run(main())


def serve_sync(port: int, workers: int = 16) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=OPTIONS)
    server.add_generic_rpc_handlers((_sync_handlers(),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def serve_aio_asyncio(port: int) -> None:
    """grpc.aio on the standard asyncio loop (for reference)."""
    async def main() -> None:
        server = grpc.aio.server(options=OPTIONS)
        server.add_generic_rpc_handlers((_aio_handlers(),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())
