"""The gRPC endpoint (KServe v2 GRPCInferenceService, Triton's --grpc-port).

    server = await start_grpc_server(core, "0.0.0.0", 8001)
    ...
    await server.close()

A `grpc.aio` server on the running event loop, serving `InferenceServicer`. Messages
are Triton's own (`tritonclient.grpc.service_pb2`); the message size limit is Triton's
(INT32_MAX both ways).
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from tritonclient.grpc.service_pb2_grpc import add_GRPCInferenceServiceServicer_to_server

from pbserve.backend.api import InferenceCore
from pbserve.server.grpc_service import InferenceServicer

log = logging.getLogger("pbserve.grpc")

MAX_MESSAGE_BYTES = 2**31 - 1  # Triton's MAX_GRPC_MESSAGE_SIZE
# How long close() lets calls in progress finish before cancelling them.
CLOSE_GRACE_S = 5.0


class GrpcServer:
    """A started grpc.aio server; `close()` stops it."""

    def __init__(self, server: grpc.aio.Server, port: int) -> None:
        self._server = server
        self.port = port  # the bound port (useful when started on port 0)

    async def close(self, grace: float = CLOSE_GRACE_S) -> None:
        """Refuse new calls, give those in progress `grace` seconds, then cancel them
        (open streams' requests are cancelled with them)."""
        await self._server.stop(grace)


SERVICE = "inference.GRPCInferenceService"
# Methods whose servicer takes and returns the message bytes itself (grpc_wire.py).
RAW_METHODS = ("ModelInfer",)


class _Handlers:
    """Stands in for the server while the generated code registers the service: keeps
    the method handlers it builds."""

    def __init__(self) -> None:
        self.methods: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same handlers as the registered ones below

    def add_registered_method_handlers(self, service: str, methods: dict) -> None:
        self.methods.update(methods)


def add_servicer(server: grpc.aio.Server, servicer: InferenceServicer) -> None:
    """The generated registration of Triton's service, but for RAW_METHODS: no
    deserializer or serializer, the servicer works on the bytes."""
    handlers = _Handlers()
    add_GRPCInferenceServiceServicer_to_server(servicer, handlers)
    methods = handlers.methods
    for name in RAW_METHODS:
        methods[name] = grpc.unary_unary_rpc_method_handler(getattr(servicer, name))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    server.add_registered_method_handlers(SERVICE, methods)


def _target(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    return f"{host}:{port}"


async def start_grpc_server(core: InferenceCore, host: str, port: int,
                            max_message_bytes: int = MAX_MESSAGE_BYTES) -> GrpcServer:
    """Listen on host:port; raises OSError when the address cannot be bound."""
    server = grpc.aio.server(options=[
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        # Without this a second server on the same port would bind silently.
        ("grpc.so_reuseport", 0),
    ])
    add_servicer(server, InferenceServicer(core))
    target = _target(host, port)
    try:
        bound = server.add_insecure_port(target)
    except RuntimeError as exc:
        raise OSError(f"failed to bind the gRPC server to {target}: {exc}") from None
    if bound == 0:
        raise OSError(f"failed to bind the gRPC server to {target}")
    await server.start()
    log.info("gRPC server listening on %s", _target(host, bound))
    return GrpcServer(server, bound)
