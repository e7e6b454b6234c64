"""The server assembled: the model manager, the request-plane node, the HTTP, gRPC and
metrics servers; run until SIGINT or SIGTERM, then stopped in order (shutdown.py).

The command line (pbserve/cli/) parses and checks the flags first: `run` takes them
checked, with the settings they derive (`DerivedSettings`).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pbserve.core.api import InferenceCore
from pbserve.core.cache.response_cache import ResponseCache
from pbserve.core.config.config_sources import ConfigSources
from pbserve.core.manager import ModelManager
from pbserve.core.observability.tracing import TRACER
from pbserve.core.repository.cloud_repository import CloudRepositories, is_cloud
from pbserve.core.repository.repository import check_repositories
from pbserve.model_backends import set_backend_directory
from pbserve.errors import ServerError
from pbserve.server.grpc.h2.limits import GrpcLimits
from pbserve.core.instances.model_debug import set_model_debug, unknown_debugged_model
from pbserve.core.instances.rate_limiter import parse_resource, set_rate_limit
from pbserve.server.grpc.server import start_grpc_server
from pbserve.server.http.limits import HttpLimits
from pbserve.server.http.server import start_http_server, start_metrics_server
from pbserve.server.endpoints import Endpoints
from pbserve.server.listener import BindError
from pbserve.server.tls import TlsConfig
from pbserve.exit_signals import ShutdownSignals
from pbserve.shutdown import Frontend, shut_down, shutdown_deadline

if TYPE_CHECKING:  # the plane imports nats: only with --request-plane
    from pbserve.distributed.node import Node

log = logging.getLogger("pbserve")


@dataclass(frozen=True)
class DerivedSettings:
    """What the server takes beyond the raw flags, made and checked from them
    (pbserve/cli/settings.py)."""

    limits: HttpLimits
    http_tls: TlsConfig | None
    grpc_tls: TlsConfig | None
    http_restricted: dict
    grpc_restricted: dict
    auto_complete: bool
    cache_size: int | None = None  # the response cache's bytes (None: no cache)
    grpc_limits: GrpcLimits = GrpcLimits()  # the zttp transport's (--grpc-*-timeout-secs...)


# After `serve` has stopped everything it started, tasks some library left behind are
# cancelled and given this long to end; asyncio.run would wait for them without limit
# (a worker whose NATS server died with it once waited there for good).
LEFTOVER_TASKS_S = 5.0


def run(args: argparse.Namespace, settings: DerivedSettings) -> int:
    """Serve until SIGINT or SIGTERM, on uvloop; the exit status."""
    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio works
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(serve(args, settings))
    finally:
        try:
            _end_leftover_tasks(loop)
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _end_leftover_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still running on `loop` and wait for it, LEFTOVER_TASKS_S at most
    (then name what did not end); async generators are closed within the same bound."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        _, pending = loop.run_until_complete(asyncio.wait(tasks, timeout=LEFTOVER_TASKS_S))
        for task in pending:
            log.warning("a task did not end within %.0f s of shutdown: %r",
                        LEFTOVER_TASKS_S, task)
    loop.run_until_complete(asyncio.wait([loop.create_task(loop.shutdown_asyncgens())],
                                         timeout=LEFTOVER_TASKS_S))


def build_manager(args: argparse.Namespace, settings: DerivedSettings,
                  repositories: CloudRepositories | None = None) -> ModelManager | None:
    """The model manager of --model-repository (None without: a frontend of the plane);
    `repositories`: those paths with the cloud ones copied locally."""
    if not args.model_repository:
        return None
    set_backend_directory(args.backend_directory)
    set_model_debug(args.model_debug, args.model_debug_port, sys.stdin.isatty())
    set_rate_limit(args.rate_limit.lower(), [parse_resource(r) for r in args.rate_limit_resource])
    paths = repositories.paths if repositories is not None else args.model_repository
    manager = ModelManager([Path(p) for p in paths],
                           control_mode=args.model_control_mode,
                           startup_models=args.load_model,
                           auto_complete=settings.auto_complete,
                           config_sources=ConfigSources.from_files(
                               args.model_config_defaults, args.backend_config,
                               args.cuda_memory_pool_byte_size),
                           poll_secs=args.repository_poll_secs,
                           allow_client_shm=args.allow_client_shm,
                           restart_wait_s=args.restart_wait_secs,
                           refresh=repositories.refresh if repositories is not None
                           and repositories.has_cloud else None,
                           model_namespacing=args.model_namespacing)
    manager.strict_readiness = args.strict_readiness
    if settings.cache_size:
        manager.response_cache = ResponseCache(settings.cache_size)
        log.info("Response cache: 'local', %d bytes", settings.cache_size)
    manager.load_thread_count = args.model_load_thread_count
    manager.stub_zygote = args.stub_zygote
    return manager


async def join_plane(args: argparse.Namespace, manager: ModelManager | None) -> Node | None:
    """This process's node on --request-plane (None, logged, if it cannot connect)."""
    from pbserve.distributed.node import DataPlaneSettings, Node

    from pbserve.distributed.request_plane import ConnectionOptions, PlaneConnectError

    data_plane = DataPlaneSettings(args.data_plane_address, args.plane_inline_max_bytes,
                                   args.data_plane_ttl_secs, args.http_max_input_size)
    try:
        return await Node.start(args.request_plane, manager, args.plane_heartbeat_secs,
                                args.worker_name, ConnectionOptions.from_args(args),
                                control_mode=args.model_control_mode, data_plane=data_plane)
    except PlaneConnectError as exc:
        log.error("%s", exc)
        return None


async def start_servers(core: InferenceCore, args: argparse.Namespace,
                        settings: DerivedSettings, servers: list[Frontend],
                        endpoints: Endpoints) -> None:
    """Start the HTTP, gRPC and metrics servers the --allow-* flags ask for on the
    sockets `endpoints` bound, each added to `servers` once started (what started is
    stopped even if a later one fails)."""
    if endpoints.http is not None:
        servers.append(await start_http_server(core, args.http_address, args.http_port,
                                               settings.limits, settings.http_tls,
                                               settings.http_restricted, endpoints.http))
        log.info("Started HTTPService at %s:%d", args.http_address, args.http_port)
    if endpoints.grpc is not None:
        servers.append(await start_grpc_server(core, args.grpc_address, args.grpc_port,
                                               args.http_max_input_size, settings.grpc_tls,
                                               settings.grpc_restricted, args.grpc_transport,
                                               settings.grpc_limits, endpoints.grpc))
        log.info("Started GRPCInferenceService at %s:%d", args.grpc_address, args.grpc_port)
    if endpoints.metrics is not None:
        servers.append(await start_metrics_server(core, args.metrics_address,
                                                  args.metrics_port, settings.limits,
                                                  endpoints.metrics))
        log.info("Started Metrics Service at %s:%d", args.metrics_address, args.metrics_port)


async def serve(args: argparse.Namespace, settings: DerivedSettings) -> int:
    """Start everything, wait for a signal, stop in order: a worker leaves the plane
    first (no new requests), then the servers and the models (shutdown.py), then the
    plane's connection; the exit status. Before anything loads, as tritonserver words
    them: a local repository that cannot be read (`error: creating server: ...` on
    stderr), an endpoint's address that cannot be bound (`failed to start HTTP service:
    ...` in the log); either is status 1."""
    try:
        check_repositories(Path(p) for p in args.model_repository if not is_cloud(p))
    except ServerError as exc:
        print(f"error: creating server: {exc.code.text} - {exc.message}", file=sys.stderr)
        return 1
    try:  # the ports, held from here on (server/endpoints.py)
        endpoints = Endpoints.bind(args)
    except BindError as exc:
        log.error("%s", exc)
        return 1
    try:
        try:  # cloud repositories are copied into private local directories
            repositories = await asyncio.to_thread(CloudRepositories, args.model_repository)
        except ValueError as exc:
            log.error("%s", exc)
            return 1
        try:
            return await _serve(args, settings, repositories, endpoints)
        finally:
            repositories.close()
    finally:
        endpoints.close()


async def _serve(args: argparse.Namespace, settings: DerivedSettings,
                 repositories: CloudRepositories, endpoints: Endpoints) -> int:
    manager = build_manager(args, settings, repositories)
    core: InferenceCore | None = manager
    node: Node | None = None
    signals = ShutdownSignals(asyncio.get_running_loop(),
                              shutdown_deadline(args.exit_timeout_secs))
    signals.install()
    if manager is not None and (error := unknown_debugged_model(manager.repository_models())):
        log.error("%s", error)
        return 1
    servers: list[Frontend] = []
    try:
        if manager is not None:
            await manager.start()
            failed = manager.failed_models()
            if failed and args.exit_on_error:
                log.error("failed to load all models (%s); exiting (--exit-on-error=false "
                          "serves the others)", ", ".join(failed))
                return 1
        if args.request_plane:
            node = await join_plane(args, manager)
            if node is None:
                return 1
            core = node.core  # a worker's: its models, and the plane's for the others
        assert core is not None
        try:
            await start_servers(core, args, settings, servers, endpoints)
        except OSError as exc:  # grpcio binds by itself (grpc/server.py)
            log.error("%s", exc)
            return 1
        # What start-up made (modules, configs, servers) lives as long as the server:
        # out of the collector's sight, collections walk only what requests make.
        gc.freeze()
        await signals.received.wait()
    finally:
        if node is not None:  # a worker leaves the plane first: no new requests
            await node.stop_serving(args.exit_timeout_secs)
        await shut_down(servers, manager, args.exit_timeout_secs)
        if node is not None:
            await node.close()
        TRACER.close()
        signals.cancel()
    return 0
