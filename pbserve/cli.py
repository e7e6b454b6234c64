"""`pbserve`: the server, with tritonserver's command-line flags."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from pbserve.backend.config_sources import ConfigSources
from pbserve.backend.log_settings import SERVER_LOG, LogSettings
from pbserve.backend.manager import ModelManager
from pbserve.backend.tracing import TRACER
from pbserve.ignored_flags import add_ignored_flags, warn_ignored
from pbserve.trace_flags import add_trace_flags, configure_tracing
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
    add("--log-format", choices=["default", "ISO8601"], default="default")
    add("--log-file", default="", help="append the log to this file instead of stderr")
    add("--exit-timeout-secs", type=int, default=30)
    add("--strict-readiness", type=_bool, default=True)
    add("--backend-config", action="append", default=[],
        help="<backend>,<setting>=<value>: python,default-max-batch-size=N is used; "
             "other settings are accepted and ignored")
    add("--disable-auto-complete-config", action="store_true")
    add("--strict-model-config", type=_bool, default=None,
        help="true: as --disable-auto-complete-config; false: auto-complete (tritonserver's "
             "older flag)")
    add("--exit-on-error", type=_bool, default=True,
        help="exit when a model fails to load at start-up (tritonserver's default)")
    add("--model-load-thread-count", type=int, default=4,
        help="models loaded at once at start-up")
    add_trace_flags(parser)
    add_ignored_flags(parser)
    return parser


def configure_logging(args: argparse.Namespace) -> None:
    """The log settings of the flags; `/v2/logging` changes them later (log_settings.py)."""
    SERVER_LOG.install(LogSettings(
        log_file=args.log_file, log_info=args.log_info, log_warning=args.log_warning,
        log_error=args.log_error, log_verbose_level=max(args.log_verbose, 0),
        log_format=args.log_format))


def auto_complete(args: argparse.Namespace) -> bool:
    """Whether models' `auto_complete_config` runs (--disable-auto-complete-config, or
    the older --strict-model-config=true, turns it off)."""
    if args.strict_model_config is not None:
        return not args.strict_model_config
    return not args.disable_auto_complete_config


async def serve(args: argparse.Namespace) -> int:
    warn_ignored(args)
    manager = ModelManager([Path(p) for p in args.model_repository],
                           control_mode=args.model_control_mode,
                           startup_models=args.load_model,
                           auto_complete=auto_complete(args),
                           config_sources=ConfigSources.from_files(
                               args.model_config_defaults, args.backend_config),
                           poll_secs=args.repository_poll_secs,
                           allow_client_shm=args.allow_client_shm)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    manager.strict_readiness = args.strict_readiness
    manager.load_thread_count = args.model_load_thread_count
    servers = []
    try:
        await manager.start()
        failed = manager.failed_models()
        if failed and args.exit_on_error:
            log.error("failed to load all models (%s); exiting (--exit-on-error=false "
                      "serves the others)", ", ".join(failed))
            return 1
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
        await stop.wait()
        log.info("Signal received: shutting down")
    finally:
        for server in servers:
            await server.close()
        try:
            await asyncio.wait_for(manager.stop(), args.exit_timeout_secs)
        except asyncio.TimeoutError:
            log.error("models did not finish unloading within %d s", args.exit_timeout_secs)
        TRACER.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        configure_logging(args)
    except OSError as exc:
        print(f"error: cannot open log file '{args.log_file}': {exc}", file=sys.stderr)
        return 1
    try:
        configure_tracing(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio works
        return asyncio.run(serve(args))
    return uvloop.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
