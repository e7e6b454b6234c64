"""The gRPC endpoint (KServe v2 GRPCInferenceService, Triton's --grpc-port).

    server = await start_grpc_server(core, "0.0.0.0", 8001)
    ...
    await server.close()

A server on the running event loop, serving `InferenceServicer`: on zttp's HTTP/2
(grpc/h2/, the default) or a `grpc.aio` server (`transport="grpcio"`). Messages
are Triton's own (`tritonclient.grpc.service_pb2`). Messages sent may be as large as
Triton's (INT32_MAX); a message received is bounded by twice `max_input_size` (the
server's --http-max-input-size: for its tensor data and for the rest, as an HTTP body is):
a larger one ends its call with RESOURCE_EXHAUSTED before it is read whole.
"""

from __future__ import annotations

import logging

import grpc

from pbserve.core.api import InferenceCore
from pbserve.server.grpc.h2.limits import GrpcLimits
from pbserve.server.grpc.h2.server import H2GrpcServer, h2_handlers, infer_gatherers
from pbserve.server.grpc.handlers import add_service
from pbserve.server.grpc.service import InferenceServicer
from pbserve.server.limits import DEFAULT_MAX_INPUT_SIZE
from pbserve.server.listener import Listener
from pbserve.server.restrictions import Restriction
from pbserve.server.tls import TlsConfig

log = logging.getLogger("pbserve.grpc")

MAX_MESSAGE_BYTES = 2**31 - 1  # Triton's MAX_GRPC_MESSAGE_SIZE
# --grpc-transport: the HTTP/2 under the endpoint (zttp: grpc/h2/; docs/performance.md)
TRANSPORTS = ("zttp", "grpcio")
# How long close() lets calls in progress finish before cancelling them.
CLOSE_GRACE_S = 5.0


class GrpcServer:
    """A started grpc.aio server; `close()` stops it."""

    def __init__(self, server: grpc.aio.Server, port: int,
                 servicer: InferenceServicer | None = None) -> None:
        self._server = server
        self._servicer = servicer
        self.port = port  # the bound port (useful when started on port 0)

    async def close(self, grace: float = CLOSE_GRACE_S) -> None:
        """Refuse new calls, give those in progress `grace` seconds, then cancel them
        (open streams' requests are cancelled with them). Open streams read no more
        requests: each ends with UNAVAILABLE once its requests have answered."""
        if self._servicer is not None:
            self._servicer.stop_streams()
        await self._server.stop(grace)


# grpc-core's bound on a connection's concurrent streams (its default is unlimited): a
# rapid-reset client then waits for its cancelled calls to end before opening more.
GRPCIO_MAX_CONCURRENT_STREAMS = 100


def grpcio_guard_options(limits: GrpcLimits) -> list[tuple[str, int]]:
    """grpc-core's options for what GrpcLimits bounds on the zttp transport: streams at
    once per connection, an idle connection's life."""
    options = [("grpc.max_concurrent_streams", GRPCIO_MAX_CONCURRENT_STREAMS)]
    if limits.idle_timeout_s:
        options.append(("grpc.max_connection_idle_ms", int(limits.idle_timeout_s * 1000)))
    return options


def _target(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    return f"{host}:{port}"


async def start_grpc_server(core: InferenceCore, host: str, port: int,
                            max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
                            tls: TlsConfig | None = None,
                            restricted: dict[str, Restriction] | None = None,
                            transport: str = "zttp",
                            limits: GrpcLimits = GrpcLimits(),
                            listener: Listener | None = None) -> GrpcServer | H2GrpcServer:
    """Listen on host:port (with TLS when `tls`; `restricted`: the groups
    --grpc-restricted-protocol closes; `transport`: one of TRANSPORTS; `limits`: the zttp
    transport's timeouts and caps, of which grpcio takes the stream and idle bounds;
    `listener`: host:port's sockets bound beforehand, pbserve/server/listener.py);
    raises OSError (BindError, in tritonserver's words) when the address cannot be
    bound. grpcio binds by itself: it gets the port the moment the listener lets go."""
    listener = listener or Listener.bind("GRPC", host, port)
    limit = min(2 * max_input_size, MAX_MESSAGE_BYTES)
    servicer = InferenceServicer(core, limits.max_pending_per_connection)
    if transport == "zttp":
        h2 = H2GrpcServer(servicer, h2_handlers(servicer, restricted), limit, limits,
                          infer_gatherers(core))
        await h2.listen(listener, tls)
        log.info("gRPC server (zttp) listening on %s", _target(host, h2.port))
        return h2
    server = grpc.aio.server(options=[
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", limit),
        # Without this a second server on the same port would bind silently.
        ("grpc.so_reuseport", 0),
        *grpcio_guard_options(limits),
    ], maximum_concurrent_rpcs=limits.max_pending)
    add_service(server, servicer, servicer.errors, restricted)
    target = _target(host, listener.port)
    listener.close()
    try:
        if tls is None:
            bound = server.add_insecure_port(target)
        else:
            bound = server.add_secure_port(target, tls.grpc_credentials())
    except RuntimeError as exc:
        raise OSError(f"failed to bind the gRPC server to {target}: {exc}") from None
    if bound == 0:
        raise OSError(f"failed to bind the gRPC server to {target}")
    await server.start()
    log.info("gRPC server listening on %s", _target(host, bound))
    return GrpcServer(server, bound, servicer)
