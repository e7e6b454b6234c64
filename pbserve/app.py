"""The server assembled: the model manager, the request-plane node, the HTTP, gRPC and
metrics servers; run until SIGINT or SIGTERM, then stopped in order (shutdown.py).

The command line (pbserve/cli/) parses and checks the flags first and makes them into
one `ServerOptions` (pbserve/options.py): `run` takes it, and hands each part down.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pbserve.core.api import InferenceCore
from pbserve.core.instances.model_debug import unknown_debugged_model
from pbserve.core.manager import ModelManager
from pbserve.core.observability.tracing import TRACER
from pbserve.core.repository.cloud_repository import CloudRepositories, is_cloud
from pbserve.core.repository.repository import check_repositories
from pbserve.errors import ServerError
from pbserve.exit_signals import ShutdownSignals
from pbserve.options import ServerOptions
from pbserve.server.endpoints import Endpoints
from pbserve.server.listener import BindError
from pbserve.server.start import start_servers
from pbserve.shutdown import Frontend, shut_down, shutdown_deadline

if TYPE_CHECKING:  # the plane imports nats: only with --request-plane
    from pbserve.distributed.node import Node

log = logging.getLogger("pbserve")


# After `serve` has stopped everything it started, tasks some library left behind are
# cancelled and given this long to end; asyncio.run would wait for them without limit
# (a worker whose NATS server died with it once waited there for good).
LEFTOVER_TASKS_S = 5.0


def run(options: ServerOptions) -> int:
    """Serve until SIGINT or SIGTERM, on uvloop; the exit status."""
    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio works
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(serve(options))
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


def build_manager(options: ServerOptions,
                  repositories: CloudRepositories | None = None) -> ModelManager | None:
    """The model manager of --model-repository (None without: a frontend of the plane);
    `repositories`: those paths with the cloud ones copied locally."""
    if not options.repositories:
        return None
    paths = repositories.paths if repositories is not None else options.repositories
    refresh = repositories.refresh if repositories is not None and repositories.has_cloud \
        else None
    return ModelManager([Path(p) for p in paths], options.core,
                        config_sources=options.config_sources, refresh=refresh)


async def join_plane(options: ServerOptions, manager: ModelManager | None) -> Node | None:
    """This process's node on --request-plane (None, logged, if it cannot connect)."""
    from pbserve.distributed.node import Node
    from pbserve.distributed.request_plane import PlaneConnectError

    plane = options.plane
    assert plane is not None
    try:
        return await Node.start(plane.url, manager, plane.heartbeat_s, plane.worker_name,
                                plane.connection, control_mode=options.core.control_mode,
                                data_plane=plane.data_plane)
    except PlaneConnectError as exc:
        log.error("%s", exc)
        return None


async def serve(options: ServerOptions) -> int:
    """Start everything, wait for a signal, stop in order: a worker leaves the plane
    first (no new requests), then the servers and the models (shutdown.py), then the
    plane's connection; the exit status. Before anything loads, as tritonserver words
    them: a local repository that cannot be read (`error: creating server: ...` on
    stderr), an endpoint's address that cannot be bound (`failed to start HTTP service:
    ...` in the log); either is status 1."""
    try:
        check_repositories(Path(p) for p in options.repositories if not is_cloud(p))
    except ServerError as exc:
        print(f"error: creating server: {exc.code.text} - {exc.message}", file=sys.stderr)
        return 1
    try:  # the ports, held from here on (server/endpoints.py)
        endpoints = Endpoints.bind(options.frontends)
    except BindError as exc:
        log.error("%s", exc)
        return 1
    try:
        try:  # cloud repositories are copied into private local directories
            repositories = await asyncio.to_thread(CloudRepositories,
                                                   list(options.repositories))
        except ValueError as exc:
            log.error("%s", exc)
            return 1
        try:
            return await _serve(options, repositories, endpoints)
        finally:
            repositories.close()
    finally:
        endpoints.close()


async def _serve(options: ServerOptions, repositories: CloudRepositories,
                 endpoints: Endpoints) -> int:
    manager = build_manager(options, repositories)
    core: InferenceCore | None = manager
    node: Node | None = None
    signals = ShutdownSignals(asyncio.get_running_loop(),
                              shutdown_deadline(options.exit_timeout_s))
    signals.install()
    debug = options.core.model_debug
    if manager is not None and debug.model and (error := unknown_debugged_model(
            debug, manager.repository_models())):  # a scan only with --model-debug
        log.error("%s", error)
        return 1
    servers: list[Frontend] = []
    slots = None
    if options.frontend_processes > 1 and manager is not None:
        from pbserve.frontends.slots import FrontendSlots
        slots = FrontendSlots(options.frontend_processes)
    try:
        if manager is not None:
            try:
                await manager.start(slots.fds() if slots is not None else ())
            except ServerError as exc:  # the redis cache's server cannot be reached
                print(f"error: creating server: {exc.code.text} - {exc.message}",
                      file=sys.stderr)
                return 1
            failed = manager.failed_models()
            if failed and options.exit_on_error:
                log.error("failed to load all models (%s); exiting (--exit-on-error=false "
                          "serves the others)", ", ".join(failed))
                return 1
        if options.plane is not None:
            node = await join_plane(options, manager)
            if node is None:
                return 1
            core = node.core  # a worker's: its models, and the plane's for the others
        assert core is not None
        if options.frontend_processes > 1:  # HTTP and gRPC in processes of their own
            assert manager is not None and slots is not None
            from pbserve.frontends.start import start as start_frontends
            servers.append(await start_frontends(slots, core, manager, endpoints,
                                                 options.command_line))
            # the core keeps /metrics and the OpenAI endpoint
            endpoints = Endpoints(metrics=endpoints.metrics, openai=endpoints.openai)
        try:
            await start_servers(core, options.frontends, servers, endpoints)
        except OSError as exc:  # grpcio binds by itself (grpc/server.py)
            log.error("%s", exc)
            return 1
        # What start-up made (modules, configs, servers) lives as long as the server:
        # out of the collector's sight, collections walk only what requests make.
        gc.freeze()
        await signals.received.wait()
    finally:
        if node is not None:  # a worker leaves the plane first: no new requests
            await node.stop_serving(options.exit_timeout_s)
        await shut_down(servers, manager, options.exit_timeout_s)
        if node is not None:
            await node.close()
        TRACER.close()
        signals.cancel()
        if slots is not None:
            slots.close()
    return 0
