"""The HTTP/REST frontend (KServe v2 + Triton's extensions) and the metrics endpoint.

    server = await start_http_server(core, "0.0.0.0", 8000)
    metrics = await start_metrics_server(core, "0.0.0.0", 8002)
    ...
    await server.close()

Both listen on the running event loop (uvloop when the caller installed it; the
protocol is loop-agnostic) and talk only to the InferenceCore. Each takes the sockets
of a `Listener` bound beforehand (pbserve/server/listener.py: the server binds its
ports before the models load), or binds host:port itself.
"""

from __future__ import annotations

import inspect
import asyncio
import logging
from dataclasses import replace

from pbserve.core.api import InferenceCore
from pbserve.server.connections import ConnectionSet
from pbserve.server.http.limits import HttpLimits
from pbserve.server.http.messages import HttpReply, HttpRequest, method_not_allowed, not_found
from pbserve.server.http.protocol import Handler, HttpConnection, Placer
from pbserve.server.http.routes import Routes
from pbserve.server.listener import Listener, Servers
from pbserve.server.restrictions import Restriction
from pbserve.server.tls import TlsConfig

log = logging.getLogger("pbserve.http")

CONTENT_METRICS = b"text/plain; version=0.0.4; charset=utf-8"
# How long close() lets requests in progress finish before cutting them off.
CLOSE_GRACE_S = 5.0
METRICS_MAX_CONNECTIONS = 64


class HttpServer:
    """A listening socket and its connections; `close()` stops both."""

    def __init__(self, server: Servers, connections: ConnectionSet) -> None:
        self._server = server
        self._connections = connections

    @property
    def port(self) -> int:
        """The bound port (useful when started on port 0)."""
        return self._server.sockets[0].getsockname()[1]

    async def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Stop accepting, close idle connections, give busy ones `grace_s` to answer."""
        self._server.close()
        self._connections.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while True:
            for connection in self._connections:
                if connection.idle:
                    connection.close()
            if not self._connections or loop.time() >= deadline:
                break
            await asyncio.sleep(0.02)
        for connection in self._connections:
            connection.abort()
        await self._server.wait_closed()


async def serve(handler: Handler, listener: Listener, limits: HttpLimits = HttpLimits(),
                tls: TlsConfig | None = None, placer: Placer | None = None) -> HttpServer:
    """Accept on `listener`'s sockets (HTTPS with `tls`) and answer every request with
    `handler`; `placer`: where large infer bodies gather their tensors (protocol.py)."""
    connections = ConnectionSet(limits)
    tls_options = {}
    if tls is not None:  # a handshake counts as part of the head (connections start after)
        tls_options["ssl"] = tls.ssl_context()
        if limits.header_timeout_s:
            tls_options["ssl_handshake_timeout"] = limits.header_timeout_s
    server = await listener.serve(lambda: HttpConnection(handler, connections, placer),
                                  **tls_options)
    connections.start()
    log.info("HTTP%s server listening on %s:%d", "S" if tls else "", listener.host,
             listener.port)
    return HttpServer(server, connections)


async def start_http_server(core: InferenceCore, host: str, port: int,
                            limits: HttpLimits = HttpLimits(),
                            tls: TlsConfig | None = None,
                            restricted: dict[str, Restriction] | None = None,
                            listener: Listener | None = None) -> HttpServer:
    """The KServe v2 HTTP/REST endpoint (Triton's --http-port); `restricted`: the groups
    --http-restricted-api closes (restrictions.py); `listener`: host:port's sockets
    bound beforehand (else bound here: BindError)."""
    listener = listener or Listener.bind("HTTP", host, port)
    return await serve(Routes(core, limits, restricted), listener, limits, tls,
                       core.input_placer)


async def start_metrics_server(core: InferenceCore, host: str, port: int,
                               limits: HttpLimits = HttpLimits(),
                               listener: Listener | None = None) -> HttpServer:
    """GET /metrics in Prometheus text format (Triton's --metrics-port); scrapers need
    few connections; `listener` as start_http_server's."""
    limits = replace(limits, max_connections=min(
        limits.max_connections or METRICS_MAX_CONNECTIONS, METRICS_MAX_CONNECTIONS))

    async def metrics(request: HttpRequest) -> HttpReply:
        if request.path != "/metrics":
            return not_found()
        if request.method != b"GET":
            return method_not_allowed()
        text = core.metrics_text()  # a coroutine on a frontend of the plane
        if inspect.isawaitable(text):
            text = await text
        return HttpReply(200, (text.encode(),), CONTENT_METRICS)

    return await serve(metrics, listener or Listener.bind("Metrics", host, port), limits)
