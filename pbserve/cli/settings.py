"""The flags made into the server's options (pbserve/options.py: `server_options`), and
the log settings; each checked, with an error naming the flag when it is wrong."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pbserve.core.cache.cache_config import CacheSettings, cache_settings
from pbserve.core.config.config_sources import ConfigSources
from pbserve.core.scheduling.rate_limiter import parse_resource
from pbserve.core.instances.model_debug import ModelDebug
from pbserve.core.options import CoreOptions, RateLimit
from pbserve.errors import ServerError
from pbserve.model_backends import DEFAULT_BACKEND_DIRECTORY
from pbserve.options import PlaneOptions, ServerOptions
from pbserve.server.options import EndpointOptions, FrontendOptions
from pbserve.core.observability.log_settings import SERVER_LOG, LogSettings
from pbserve.cli.grpc_flags import grpc_limits
from pbserve.cli.openai_flags import openai_options
from pbserve.server.http.limits import HttpLimits
from pbserve.server.restrictions import GRPC_KEY_PREFIX
from pbserve.server.restrictions import parse as parse_restrictions
from pbserve.server.tls import TlsConfig


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


def server_options(args: argparse.Namespace) -> ServerOptions:
    """The server's options of the flags (in this order: the first wrong flag is the one
    named); SystemExit as the functions above, and for a --model-config-defaults or
    --backend-config that does not parse."""
    limits = http_limits(args)
    http_tls, grpc_tls = tls_config(args, "http"), tls_config(args, "grpc")
    http_restricted, grpc_restricted = restricted(args)
    frontends = FrontendOptions(
        http=EndpointOptions(args.allow_http, args.http_address, args.http_port),
        grpc=EndpointOptions(args.allow_grpc, args.grpc_address, args.grpc_port),
        metrics=EndpointOptions(args.allow_metrics, args.metrics_address, args.metrics_port),
        http_limits=limits, http_tls=http_tls, grpc_tls=grpc_tls,
        http_restricted=http_restricted, grpc_restricted=grpc_restricted,
        grpc_transport=args.grpc_transport, grpc_limits=grpc_limits(args),
        openai=openai_options(args))
    return ServerOptions(
        repositories=tuple(args.model_repository), core=core_options(args),
        config_sources=config_sources(args), frontends=frontends,
        plane=plane_options(args), exit_timeout_s=args.exit_timeout_secs,
        exit_on_error=args.exit_on_error, frontend_processes=args.frontend_processes)


def core_options(args: argparse.Namespace) -> CoreOptions:
    """The model manager's options (core/options.py)."""
    return CoreOptions(
        control_mode=args.model_control_mode, startup_models=tuple(args.load_model),
        auto_complete=auto_complete(args), poll_secs=args.repository_poll_secs,
        allow_client_shm=args.allow_client_shm, restart_wait_s=args.restart_wait_secs,
        model_namespacing=args.model_namespacing, strict_readiness=args.strict_readiness,
        load_thread_count=args.model_load_thread_count, stub_zygote=args.stub_zygote,
        response_cache=response_cache(args),
        backend_directory=Path(args.backend_directory or DEFAULT_BACKEND_DIRECTORY),
        model_debug=ModelDebug(args.model_debug or "", args.model_debug_port or "",
                               sys.stdin.isatty()),
        rate_limit=RateLimit(args.rate_limit.lower(),
                             tuple(parse_resource(r) for r in args.rate_limit_resource)),
        cpu_metrics=args.allow_metrics and args.allow_cpu_metrics,
        metrics_interval_ms=args.metrics_interval_ms)


def config_sources(args: argparse.Namespace) -> ConfigSources:
    """--model-config-defaults, --backend-config python,..., --cuda-memory-pool-byte-size;
    SystemExit naming what does not parse."""
    try:
        return ConfigSources.from_files(args.model_config_defaults, args.backend_config,
                                        args.cuda_memory_pool_byte_size)
    except ServerError as exc:
        raise SystemExit(f"Error: {exc.message}") from None


def plane_options(args: argparse.Namespace) -> PlaneOptions | None:
    """--request-plane's options (None without it); imports the plane only with it."""
    if not args.request_plane:
        return None
    from pbserve.distributed.node import DataPlaneSettings
    from pbserve.distributed.request_plane import ConnectionOptions

    return PlaneOptions(
        url=args.request_plane, heartbeat_s=args.plane_heartbeat_secs,
        worker_name=args.worker_name, connection=ConnectionOptions.from_args(args),
        data_plane=DataPlaneSettings(args.data_plane_address, args.plane_inline_max_bytes,
                                     args.data_plane_ttl_secs, args.http_max_input_size))


def response_cache(args: argparse.Namespace) -> CacheSettings | None:
    """The response cache (--cache-config, --response-cache-byte-size), None for no
    cache; SystemExit naming what is wrong."""
    try:
        return cache_settings(args.cache_config, args.response_cache_byte_size)
    except ValueError as exc:
        raise SystemExit(f"Error: {exc}") from None


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
