"""The gRPC endpoint on zttp's HTTP/2 (`--grpc-transport zttp`): an asyncio server on
the running event loop, serving the same `InferenceServicer` and method handlers as the
grpcio server (grpc/server.py), without grpcio's per-call machinery and its poller
thread. Why it exists and what it gives: docs/performance.md ("gRPC transport").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from pbserve.server.grpc.h2.connection import SHUT_WAIT_S, GrpcConnection
from pbserve.server.grpc.h2.limits import GrpcLimits
from pbserve.server.grpc.h2.pending import PendingRequests
from pbserve.server.grpc.handlers import SERVICE, method_handlers
from pbserve.server.grpc.wire import RequestGatherer
from pbserve.server.error_log import ErrorLog
from pbserve.server.connections import ConnectionSet
from pbserve.server.listener import Listener, Servers
from pbserve.server.restrictions import Restriction
from pbserve.server.tls import TlsConfig


class _PartsServicer:
    """The servicer, with ModelInfer answering the response in pieces (the connection
    sends them from their buffers)."""

    def __init__(self, servicer: Any) -> None:
        self._servicer = servicer
        self.ModelInfer = servicer.model_infer_parts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._servicer, name)


def h2_handlers(servicer: Any, restricted: dict[str, Restriction] | None
                ) -> dict[str, Any]:
    """Each RPC's handler by its HTTP/2 path ("/inference.GRPCInferenceService/...")."""
    handlers = method_handlers(_PartsServicer(servicer), servicer.errors, restricted)
    return {f"/{SERVICE.full_name}/{name}": handler for name, handler in handlers.items()}


def infer_gatherers(core: Any) -> dict[str, Callable[[int], Any]]:
    """ModelInfer's large requests gathered field by field, their tensors straight into
    the core's shm pool (grpc/wire.py RequestGatherer), where the core has one."""
    def gatherer(length: int) -> RequestGatherer | None:
        placer = core.input_placer()
        return RequestGatherer(length, placer) if placer is not None else None
    return {f"/{SERVICE.full_name}/ModelInfer": gatherer}


class H2GrpcServer:
    """A listening zttp gRPC server; `close()` stops it."""

    def __init__(self, servicer: Any, handlers: dict[str, Any], limit: int,
                 limits: GrpcLimits = GrpcLimits(),
                 gatherers: dict[str, Callable[[int], Any]] | None = None) -> None:
        self._servicer = servicer
        # "/inference.GRPCInferenceService/ModelInfer" -> grpc.RpcMethodHandler
        self.handlers = handlers
        # path -> how a large request message of that method is gathered (call.py
        # Deframer's `gatherer`)
        self.gatherers = gatherers or {}
        self.limit = limit  # the largest request message taken, in bytes
        self.limits = limits  # timeouts, caps (limits.py)
        self.connections = ConnectionSet(limits)  # the cap, and the timeouts' sweeper
        self.connections.errors = ErrorLog(logging.getLogger("pbserve.grpc"))
        self.pending = PendingRequests(limits.max_pending_per_connection, limits.max_pending)
        self.closing = False
        self._listener: Servers | None = None
        self.port = 0

    async def listen(self, listener: Listener, tls: TlsConfig | None) -> None:
        """Accept on `listener`'s sockets (pbserve/server/listener.py)."""
        context = None
        if tls is not None:
            context = tls.ssl_context()
            context.set_alpn_protocols(["h2"])
        options: dict[str, Any] = {}
        if tls is not None and self.limits.header_timeout_s:  # a handshake is a head's
            options["ssl_handshake_timeout"] = self.limits.header_timeout_s
        self._listener = await listener.serve(lambda: GrpcConnection(self), ssl=context,
                                              **options)
        self.connections.start()
        self.port = listener.port

    async def close(self, grace: float) -> None:
        """Refuse new calls, give those in progress `grace` seconds, then cancel them;
        open streams read no more requests. Each connection is closed (GOAWAY, then a
        half-close) as soon as no call runs on it."""
        self.closing = True
        self.connections.stop()
        if self._listener is not None:
            self._listener.close()
        if self._servicer is not None:
            self._servicer.stop_streams()
        for connection in list(self.connections):
            connection.close_idle(at_once=False)
        tasks = [task for connection in self.connections for task in connection.tasks]
        if tasks:
            _, left = await asyncio.wait(tasks, timeout=grace)
            for task in left:
                task.cancel()
            if left:
                await asyncio.wait(left, timeout=1.0)
        for connection in list(self.connections):
            connection.close_idle(at_once=False)
        deadline = asyncio.get_running_loop().time() + SHUT_WAIT_S + 0.1
        while self.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)  # the clients close their ends (SHUT_WAIT_S at most)
        for connection in list(self.connections):  # a call that would not end
            if connection.transport is not None:
                connection.transport.close()
        if self._listener is not None:
            await self._listener.wait_closed()
