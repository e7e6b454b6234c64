"""`pbserve`: the server, with tritonserver's command-line flags."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from pathlib import Path

from pbserve.backend.api import InferenceCore
from pbserve.backend.config.config_sources import ConfigSources
from pbserve.backend.observability.log_settings import SERVER_LOG, LogSettings
from pbserve.backend.manager import ModelManager
from pbserve.backend.scheduling.outage import RESTART_WAIT_S
from pbserve.backend.observability.tracing import TRACER
from pbserve.backends import set_backend_directory
from pbserve.ignored_flags import add_ignored_flags, warn_ignored
from pbserve.secret_env import PLANE_PASSWORD_ENV, PLANE_TOKEN_ENV
from pbserve.trace_flags import add_trace_flags, configure_tracing
from pbserve.server.grpc.server import TRANSPORTS, start_grpc_server
from pbserve.shutdown import shut_down
from pbserve.server.http.server import start_http_server, start_metrics_server
from pbserve.server.http.limits import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    DEFAULT_MAX_INPUT_SIZE,
    HttpLimits,
)
from pbserve.server.restrictions import CATEGORIES, GRPC_KEY_PREFIX
from pbserve.server.restrictions import parse as parse_restrictions
from pbserve.server.tls import TlsConfig

log = logging.getLogger("pbserve")


def _bool(text: str) -> bool:
    return text.lower() in ("1", "true", "yes", "on")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pbserve", description="Serve Triton Python-backend models (tritonserver's flags).")
    add = parser.add_argument
    add("--model-repository", "--model-store", action="append", default=[],
        dest="model_repository", help="model repository directory (repeatable); "
                                      "required unless --request-plane is given")
    add("--request-plane", default=None, metavar="nats://HOST:PORT",
        help="pbserve: join a NATS request plane (JetStream on): with a repository, serve "
             "its models to the plane (a worker); without one, serve the plane's models "
             "(a frontend). See 'Several machines' in README.md")
    add("--plane-heartbeat-secs", type=float, default=1.0,
        help="pbserve: a worker refreshes its registry entries this often; they expire "
             "after 3 beats (a killed worker's requests fail then)")
    add("--data-plane-address", default="127.0.0.1", metavar="HOST[:PORT]",
        help="pbserve: where this process's data-plane listener binds (large tensors are "
             "pulled from it over TCP); PORT 0 or none: any free port. Give an address "
             "the other hosts reach this one at; default loopback (one host)")
    add("--plane-inline-max-bytes", type=int, default=64 * 1024,
        help="pbserve: tensors up to this size travel inline in the NATS message; "
             "larger ones by the data plane")
    add("--data-plane-ttl-secs", type=float, default=60.0,
        help="pbserve: a tensor held for a peer is freed if not pulled within this")
    add("--worker-name", default="",
        help="pbserve: this worker's name on the plane (default: HOST-PID)")
    add("--request-plane-creds", default="", metavar="FILE",
        help="pbserve: NATS credentials file (JWT and NKey seed) to join the plane with")
    add("--request-plane-user", default="", help="pbserve: NATS user name")
    add("--request-plane-password", default=os.environ.get(PLANE_PASSWORD_ENV, ""),
        help=f"pbserve: NATS password (on the command line ps shows it to every user: "
             f"prefer ${PLANE_PASSWORD_ENV}, the default, or a credentials file)")
    add("--request-plane-token", default=os.environ.get(PLANE_TOKEN_ENV, ""),
        help=f"pbserve: NATS authentication token (default ${PLANE_TOKEN_ENV}; as for "
             f"the password, the environment keeps it out of ps)")
    add("--request-plane-tls-ca", default="", metavar="FILE",
        help="pbserve: CA bundle to verify the NATS server with (TLS on)")
    add("--request-plane-tls-cert", default="", metavar="FILE",
        help="pbserve: client certificate for NATS (with --request-plane-tls-key)")
    add("--request-plane-tls-key", default="", metavar="FILE",
        help="pbserve: the client certificate's private key")
    add("--http-port", type=int, default=8000)
    add("--grpc-port", type=int, default=8001)
    add("--metrics-port", type=int, default=8002)
    add("--http-address", default="127.0.0.1")
    add("--grpc-address", default="127.0.0.1")
    add("--metrics-address", default="127.0.0.1")
    add("--http-max-input-size", type=int, default=DEFAULT_MAX_INPUT_SIZE,
        help="most bytes of tensor data (and, apart, of JSON header) a request may carry, "
             "as sent and decompressed; a gRPC message received may be twice as large; "
             "default 64 MiB")
    add("--http-header-timeout-secs", type=float, default=DEFAULT_HEADER_TIMEOUT_S,
        help="pbserve: seconds a request's head may take to arrive (0: no limit)")
    add("--http-body-timeout-secs", type=float, default=DEFAULT_BODY_TIMEOUT_S,
        help="pbserve: longest pause, in seconds, within a request body (0: no limit)")
    add("--http-keepalive-timeout-secs", type=float, default=DEFAULT_KEEPALIVE_TIMEOUT_S,
        help="pbserve: seconds an idle connection stays open (0: no limit)")
    add("--http-max-connections", type=int, default=None,
        help="pbserve: open HTTP connections at most; default: the file descriptor "
             "limit less a quarter of it (at least 64)")
    for proto, whose in (("grpc", "tritonserver's"), ("http", "pbserve's (tritonserver "
                                                          "has no HTTP TLS)")):
        add(f"--{proto}-use-ssl", type=_bool, nargs="?", const=True, default=False,
            help=f"{whose}: serve {proto.upper()} over TLS")
        add(f"--{proto}-use-ssl-mutual", type=_bool, nargs="?", const=True, default=False,
            help="TLS, and clients must present a certificate the root certificate signed")
        add(f"--{proto}-server-cert", default=None, help="PEM server certificate (chain)")
        add(f"--{proto}-server-key", default=None, help="PEM server key")
        add(f"--{proto}-root-cert", default=None,
            help="PEM root certificate(s) client certificates are verified against")
    add("--http-restricted-api", action="append", default=[],
        help="<api>[,<api>...]:<key>=<value>: requests to these APIs must carry header "
             f"<key> with <value> (repeatable); APIs: {', '.join(CATEGORIES)}")
    add("--grpc-transport", choices=TRANSPORTS, default="zttp",
        help="pbserve: the HTTP/2 implementation under the gRPC endpoint: grpcio, or "
             "zttp (a sans-IO HTTP/2 engine in Zig; faster, see docs/performance.md)")
    add("--grpc-restricted-protocol", action="append", default=[],
        help="<protocol>[,...]:<key>=<value>: calls to these protocols must carry "
             "metadata triton-grpc-protocol-<key> with <value> (repeatable)")
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
    add("--exit-timeout-secs", type=float, default=30.0,
        help="on SIGINT/SIGTERM: how long requests in flight may take to finish before "
             "they are ended with an error and the models are unloaded")
    add("--restart-wait-secs", type=float, default=RESTART_WAIT_S,
        help="pbserve: how long requests queued for a model whose every instance is down "
             "(its stub died, restarts fail) wait for one to come back before they fail "
             "with UNAVAILABLE; new requests are then refused until one is back")
    add("--log-format", choices=["default", "ISO8601"], default="default")
    add("--log-file", default="", help="append the log to this file instead of stderr")
    add("--strict-readiness", type=_bool, default=True)
    add("--backend-config", action="append", default=[],
        help="<backend>,<setting>=<value>: python,default-max-batch-size=N, "
             "python,shm-default-byte-size=N (each pool's first region, default 1 MiB) and "
             "python,shm-growth-byte-size=N (what a pool grows by, default 1 MiB) are used; "
             "other settings are accepted and ignored")
    add("--backend-directory", default=None,
        help="where Python-based backends live: a model with backend: \"<name>\" runs "
             "<dir>/<name>/model.py (default /opt/tritonserver/backends, as tritonserver); "
             "pbserve's built-in onnxruntime and pytorch backends are found first")
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


def http_limits(args: argparse.Namespace) -> HttpLimits:
    """The HTTP limits the flags ask for; SystemExit with the flag's error if invalid."""
    try:
        return HttpLimits(max_input_size=args.http_max_input_size,
                          header_timeout_s=args.http_header_timeout_secs,
                          body_timeout_s=args.http_body_timeout_secs,
                          keepalive_timeout_s=args.http_keepalive_timeout_secs,
                          max_connections=args.http_max_connections)
    except ValueError as exc:
        raise SystemExit(f"Error: {exc}") from None


def tls_config(args: argparse.Namespace, proto: str) -> TlsConfig | None:
    """The TLS settings of `proto` ("http" or "grpc"); SystemExit naming what is wrong."""
    try:
        return TlsConfig.from_flags(
            proto, getattr(args, f"{proto}_use_ssl"), getattr(args, f"{proto}_use_ssl_mutual"),
            getattr(args, f"{proto}_server_cert"), getattr(args, f"{proto}_server_key"),
            getattr(args, f"{proto}_root_cert"))
    except ValueError as exc:
        raise SystemExit(f"Error: {exc}") from None


def restricted(args: argparse.Namespace) -> tuple[dict, dict]:
    """The HTTP and gRPC restrictions; SystemExit with Triton's message if malformed."""
    try:
        return (parse_restrictions(args.http_restricted_api, "http-restricted-api"),
                parse_restrictions(args.grpc_restricted_protocol, "grpc-restricted-protocol",
                                   GRPC_KEY_PREFIX, "protocol"))
    except ValueError as exc:
        raise SystemExit(f"Error: {exc}") from None


async def serve(args: argparse.Namespace) -> int:
    limits = http_limits(args)
    http_tls, grpc_tls = tls_config(args, "http"), tls_config(args, "grpc")
    http_restricted, grpc_restricted = restricted(args)
    warn_ignored(args)
    set_backend_directory(args.backend_directory)
    manager = ModelManager([Path(p) for p in args.model_repository],
                           control_mode=args.model_control_mode,
                           startup_models=args.load_model,
                           auto_complete=auto_complete(args),
                           config_sources=ConfigSources.from_files(
                               args.model_config_defaults, args.backend_config),
                           poll_secs=args.repository_poll_secs,
                           allow_client_shm=args.allow_client_shm,
                           restart_wait_s=args.restart_wait_secs
                           ) if args.model_repository else None
    core: InferenceCore | None = manager
    node = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if manager is not None:
        manager.strict_readiness = args.strict_readiness
        manager.load_thread_count = args.model_load_thread_count
    servers = []
    try:
        if manager is not None:
            await manager.start()
            failed = manager.failed_models()
            if failed and args.exit_on_error:
                log.error("failed to load all models (%s); exiting (--exit-on-error=false "
                          "serves the others)", ", ".join(failed))
                return 1
        if args.request_plane:
            # only with a plane: imports nats
            from pbserve.distributed.node import DataPlaneSettings, Node

            from pbserve.distributed.request_plane import ConnectionOptions, PlaneConnectError

            data_plane = DataPlaneSettings(args.data_plane_address,
                                           args.plane_inline_max_bytes,
                                           args.data_plane_ttl_secs,
                                           args.http_max_input_size)
            try:
                node = await Node.start(args.request_plane, manager,
                                        args.plane_heartbeat_secs, args.worker_name,
                                        ConnectionOptions.from_args(args),
                                        control_mode=args.model_control_mode,
                                        data_plane=data_plane)
            except PlaneConnectError as exc:
                log.error("%s", exc)
                return 1
            core = node.core  # a worker's: its models, and the plane's for the others
        assert core is not None
        if args.allow_http:
            servers.append(await start_http_server(core, args.http_address, args.http_port,
                                                   limits, http_tls, http_restricted))
            log.info("Started HTTPService at %s:%d", args.http_address, args.http_port)
        if args.allow_grpc:
            servers.append(await start_grpc_server(core, args.grpc_address, args.grpc_port,
                                                   args.http_max_input_size, grpc_tls,
                                                   grpc_restricted, args.grpc_transport))
            log.info("Started GRPCInferenceService at %s:%d", args.grpc_address,
                     args.grpc_port)
        if args.allow_metrics:
            servers.append(await start_metrics_server(core, args.metrics_address,
                                                      args.metrics_port, limits))
            log.info("Started Metrics Service at %s:%d", args.metrics_address,
                     args.metrics_port)
        # What start-up made (modules, configs, servers) lives as long as the server:
        # out of the collector's sight, collections walk only what requests make.
        gc.freeze()
        await stop.wait()
        log.info("Signal received: shutting down")
    finally:
        if node is not None:  # a worker leaves the plane first: no new requests
            await node.stop_serving(args.exit_timeout_secs)
        await shut_down(servers, manager, args.exit_timeout_secs)
        if node is not None:
            await node.close()
        TRACER.close()
    return 0


def check_request_plane_options(args: argparse.Namespace) -> str:
    """What is wrong with the --request-plane-* flags ('' when nothing): a file that
    cannot be read, or the flags without --request-plane. Imports nothing of the plane
    unless --request-plane is given."""
    given = [name for name, value in vars(args).items()
             if name.startswith("request_plane_") and value]
    if not args.request_plane:
        return ("--" + given[0].replace("_", "-") + " needs --request-plane") if given else ""
    from pbserve.distributed.request_plane import ConnectionOptions

    try:
        ConnectionOptions.from_args(args).check()
    except ValueError as exc:
        return str(exc)
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.model_repository and not args.request_plane:
        parser.error("--model-repository is required (or --request-plane, for a frontend)")
    if args.plane_inline_max_bytes < 0 or args.data_plane_ttl_secs <= 0:
        parser.error("--plane-inline-max-bytes must be >= 0 and --data-plane-ttl-secs > 0")
    port = args.data_plane_address.rpartition(":")[2] if ":" in args.data_plane_address \
        and not args.data_plane_address.endswith("]") else "0"
    if not port.isdigit() or int(port) > 65535:
        parser.error(f"--data-plane-address '{args.data_plane_address}': expected "
                     f"HOST[:PORT] (an IPv6 HOST in brackets)")
    if plane_error := check_request_plane_options(args):
        print(f"error: {plane_error}", file=sys.stderr)
        return 1
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
