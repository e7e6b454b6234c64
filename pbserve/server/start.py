"""The HTTP, gRPC, metrics and OpenAI servers the flags ask for, started on the sockets
bound before the models loaded (endpoints.py): by the server (app.py), or by each of its
frontend processes (pbserve/frontends/)."""

from __future__ import annotations

import logging

from pbserve.core.api import InferenceCore
from pbserve.server.endpoints import Endpoints
from pbserve.server.grpc.server import start_grpc_server
from pbserve.server.http.server import start_http_server, start_metrics_server
from pbserve.server.openai.server import start_openai_server
from pbserve.server.options import FrontendOptions
from pbserve.shutdown import Frontend

log = logging.getLogger("pbserve")


async def start_servers(core: InferenceCore, options: FrontendOptions,
                        servers: list[Frontend], endpoints: Endpoints) -> None:
    """Start the HTTP, gRPC and metrics servers the --allow-* flags ask for on the
    sockets `endpoints` bound, each added to `servers` once started (what started is
    stopped even if a later one fails)."""
    http, grpc, metrics = options.http, options.grpc, options.metrics
    if endpoints.http is not None:
        servers.append(await start_http_server(core, http.address, http.port,
                                               options.http_limits, options.http_tls,
                                               options.http_restricted, endpoints.http))
        log.info("Started HTTPService at %s:%d", http.address, http.port)
    if endpoints.grpc is not None:
        servers.append(await start_grpc_server(core, grpc.address, grpc.port,
                                               options.max_input_size, options.grpc_tls,
                                               options.grpc_restricted,
                                               options.grpc_transport, options.grpc_limits,
                                               endpoints.grpc))
        log.info("Started GRPCInferenceService at %s:%d", grpc.address, grpc.port)
    if endpoints.metrics is not None:
        servers.append(await start_metrics_server(core, metrics.address, metrics.port,
                                                  options.http_limits, endpoints.metrics))
        log.info("Started Metrics Service at %s:%d", metrics.address, metrics.port)
    openai = options.openai
    if endpoints.openai is not None and openai is not None:
        servers.append(await start_openai_server(core, openai, options.http_limits,
                                                 endpoints.openai))
        log.info("Started OpenAI-compatible service at %s:%d", openai.address, openai.port)
