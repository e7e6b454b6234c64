"""pbserve's own core and servicer behind an ASGI gRPC adapter (a prototype, bench only).

Runs the real ModelManager (stubs, shm) on the ASGI server's event loop, started by the
lifespan, and answers unary RPCs with pbserve's `InferenceServicer` through a stand-in for
grpc's ServicerContext. It measures what pbserve itself would gain on a transport, beyond
the bare echo. Repository: $PBSERVE_REPO (default: the anchor models).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from google.protobuf.message import Message  # noqa: E402
from tritonclient.grpc import service_pb2 as pb  # noqa: E402

from grpc_echo import echo  # noqa: E402
from grpc_echo.framing import Deframer, frame  # noqa: E402

_START = {"type": "http.response.start", "status": 200, "trailers": True,
          "headers": [(b"content-type", b"application/grpc")]}
_OK = {"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")]}
_state: dict[str, Any] = {}


class _Abort(Exception):
    def __init__(self, code: Any, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class _Context:
    """The part of grpc.aio.ServicerContext the servicer uses."""

    async def abort(self, code: Any, message: str) -> None:
        raise _Abort(code, message)


def _methods() -> dict[str, tuple[Any, type[Message]]]:
    servicer = _state["servicer"]
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    methods = {}
    for m in service.methods:
        if m.client_streaming or m.server_streaming:
            continue
        # ModelInfer is registered on bytes (grpc/wire.py): no message type
        request_type = None if m.name == "ModelInfer" else getattr(pb, m.input_type.name)
        methods[f"{echo.PREFIX}{m.name}"] = (getattr(servicer, m.name), request_type)
    return methods


async def _startup() -> None:
    from pbserve.backend.manager import ModelManager
    from pbserve.server.grpc.service import InferenceServicer

    repo = os.environ.get("PBSERVE_REPO", "/work/shared/perf/anchor_models")
    manager = ModelManager([Path(repo)])
    await manager.start()
    _state["manager"] = manager
    _state["servicer"] = InferenceServicer(manager)
    _state["methods"] = _methods()


async def _body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ConnectionError("client went away")
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def app(scope: dict[str, Any], receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await _startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await _state["manager"].stop()
                await send({"type": "lifespan.shutdown.complete"})
                return
    method = _state["methods"].get(scope["path"])
    await send(_START)
    if method is None:
        await send({"type": "http.response.body", "body": b""})
        await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"12")]})
        return
    handler, request_type = method
    (body,) = Deframer().feed(await _body(receive))
    try:
        request = body if request_type is None else request_type.FromString(body)
        response = await handler(request, _Context())
    except _Abort as error:
        await send({"type": "http.response.body", "body": b""})
        await send({"type": "http.response.trailers", "headers": echo.Refused(
            error.code.value[0], error.message).trailers()})
        return
    if not isinstance(response, bytes):
        response = response.SerializeToString()
    await send({"type": "http.response.body", "body": frame(response)})
    await send(_OK)
