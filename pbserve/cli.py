"""`pbserve`: the server, with tritonserver's command-line flags."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from pathlib import Path

from pbserve.backend.config_sources import ConfigSources
from pbserve.backend.manager import ModelManager
from pbserve.server.grpc_server import start_grpc_server
from pbserve.server.http import start_http_server, start_metrics_server

log = logging.getLogger("pbserve")


def _bool(text: str) -> bool:
    return text.lower() in ("1", "true", "yes", "on")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pbserve", description="Serve Triton Python-backend models (tritonserver's flags).")
    add = parser.add_argument
    add("--model-repository", "--model-store", action="append", required=True,
        dest="model_repository", help="model repository directory (repeatable)")
    add("--http-port", type=int, default=8000)
    add("--grpc-port", type=int, default=8001)
    add("--metrics-port", type=int, default=8002)
    add("--http-address", default="127.0.0.1")
    add("--grpc-address", default="127.0.0.1")
    add("--metrics-address", default="127.0.0.1")
    add("--allow-http", type=_bool, default=True)
    add("--allow-grpc", type=_bool, default=True)
    add("--allow-metrics", type=_bool, default=True)
    add("--allow-client-shm", type=_bool, default=True,
        help="let clients register and use shared-memory regions (Triton's system shared "
             "memory extension); false refuses them as Triton does")
    add("--model-control-mode", choices=["none", "explicit", "poll"], default="none")
    add("--repository-poll-secs", type=float, default=15.0,
        help="poll mode: seconds between two looks at the repositories")
    add("--model-config-defaults", default=None,
        help="pbserve: a partial config.pbtxt whose fields every model gets unless it "
             "sets them (see docs/configuration.md)")
    add("--load-model", action="append", default=[],
        help="model to load at start-up in explicit mode (repeatable, '*' for all)")
    add("--log-verbose", type=int, default=0)
    add("--log-info", type=_bool, default=True)
    add("--log-warning", type=_bool, default=True)
    add("--log-error", type=_bool, default=True)
    add("--exit-timeout-secs", type=int, default=30)
    add("--strict-readiness", type=_bool, default=True)
    add("--backend-config", action="append", default=[],
        help="<backend>,<setting>=<value>: python,default-max-batch-size=N is used; "
             "other settings are accepted and ignored")
    add("--backend-directory", default=None, help="accepted for compatibility; unused")
    add("--disable-auto-complete-config", action="store_true")
    return parser


def configure_logging(args: argparse.Namespace) -> None:
    level = logging.DEBUG if args.log_verbose > 0 else (
        logging.INFO if args.log_info else logging.WARNING if args.log_warning else logging.ERROR)
    logging.basicConfig(stream=sys.stderr, level=level,
                        format="%(levelname).1s%(asctime)s %(process)d %(name)s %(message)s",
                        datefmt="%m%d %H:%M:%S")


async def serve(args: argparse.Namespace) -> int:
    manager = ModelManager([Path(p) for p in args.model_repository],
                           control_mode=args.model_control_mode,
                           startup_models=args.load_model,
                           auto_complete=not args.disable_auto_complete_config,
                           config_sources=ConfigSources.from_files(
                               args.model_config_defaults, args.backend_config),
                           poll_secs=args.repository_poll_secs,
                           allow_client_shm=args.allow_client_shm)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    servers = []
    try:
        await manager.start()
        if args.allow_http:
            servers.append(await start_http_server(manager, args.http_address, args.http_port))
            log.info("Started HTTPService at %s:%d", args.http_address, args.http_port)
        if args.allow_grpc:
            servers.append(await start_grpc_server(manager, args.grpc_address, args.grpc_port))
            log.info("Started GRPCInferenceService at %s:%d", args.grpc_address,
                     args.grpc_port)
        if args.allow_metrics:
            servers.append(await start_metrics_server(manager, args.metrics_address,
                                                      args.metrics_port))
            log.info("Started Metrics Service at %s:%d", args.metrics_address,
                     args.metrics_port)
        # What start-up made (modules, configs, servers) lives as long as the server:
        # out of the collector's sight, collections walk only what requests make.
        gc.freeze()
        await stop.wait()
        log.info("Signal received: shutting down")
    finally:
        for server in servers:
            await server.close()
        try:
            await asyncio.wait_for(manager.stop(), args.exit_timeout_secs)
        except asyncio.TimeoutError:
            log.error("models did not finish unloading within %d s", args.exit_timeout_secs)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio works
        return asyncio.run(serve(args))
    return uvloop.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
