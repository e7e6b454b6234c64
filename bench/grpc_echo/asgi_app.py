"""The echo as an ASGI app, for ASGI servers with HTTP/2 and the trailers extension
(hypercorn, pyvoy, uvicorn on zttp, granian): gRPC needs `grpc-status` in trailers."""

from __future__ import annotations

from typing import Any

from grpc_echo import echo
from grpc_echo.framing import Deframer, frame

_START = {"type": "http.response.start", "status": 200, "trailers": True,
          "headers": [(b"content-type", b"application/grpc")]}
_OK = {"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")]}


async def _body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ConnectionError("client went away")
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _wait_for_disconnect(receive, what: str) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    echo.record(f"{what} cancelled")


async def _refuse(send, error: echo.Refused) -> None:
    await send(_START)
    await send({"type": "http.response.body", "body": b""})
    await send({"type": "http.response.trailers", "headers": error.trailers()})


async def _unary(fn, receive, send) -> None:
    (body,) = Deframer().feed(await _body(receive))
    try:
        answer = fn(body)
    except echo.Wait:
        return await _wait_for_disconnect(receive, "call")
    except echo.Refused as error:
        return await _refuse(send, error)
    await send(_START)
    await send({"type": "http.response.body", "body": frame(answer)})
    await send(_OK)


async def _stream(receive, send) -> None:
    await send(_START)
    deframer = Deframer()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        for body in deframer.feed(message.get("body", b"")):
            try:
                answer = echo.stream_infer(body)
            except echo.Wait:
                return await _wait_for_disconnect(receive, "stream")
            await send({"type": "http.response.body", "body": frame(answer), "more_body": True})
        if not message.get("more_body"):
            break
    await send({"type": "http.response.body", "body": b""})
    await send(_OK)


async def _unimplemented(send) -> None:
    await send(_START)
    await send({"type": "http.response.body", "body": b""})
    await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"12")]})


async def _lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope: dict[str, Any], receive, send) -> None:
    if scope["type"] == "lifespan":
        return await _lifespan(receive, send)
    path = scope["path"]
    if path == echo.STREAM_METHOD:
        return await _stream(receive, send)
    fn = echo.handler_for_path(path)
    if fn is None:
        return await _unimplemented(send)
    await _unary(fn, receive, send)
