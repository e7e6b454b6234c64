"""What the flags make beyond their raw values: the log settings, the HTTP limits, TLS,
the restricted APIs, the request plane's connection options; each checked, and an error
naming the flag when it is wrong."""

from __future__ import annotations

import argparse

from pbserve.app import DerivedSettings
from pbserve.core.cache.cache_config import cache_size
from pbserve.core.observability.log_settings import SERVER_LOG, LogSettings
from pbserve.cli.grpc_flags import grpc_limits
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


def derived_settings(args: argparse.Namespace) -> DerivedSettings:
    """What the server takes beyond the raw flags (in this order: the first wrong flag
    is the one named); SystemExit as the functions above."""
    limits = http_limits(args)
    http_tls, grpc_tls = tls_config(args, "http"), tls_config(args, "grpc")
    http_restricted, grpc_restricted = restricted(args)
    return DerivedSettings(grpc_limits=grpc_limits(args),
                           limits=limits, http_tls=http_tls, grpc_tls=grpc_tls,
                           http_restricted=http_restricted, grpc_restricted=grpc_restricted,
                           auto_complete=auto_complete(args),
                           cache_size=response_cache_size(args))


def response_cache_size(args: argparse.Namespace) -> int | None:
    """The response cache's size (--cache-config, --response-cache-byte-size), None for
    no cache; SystemExit naming what is wrong."""
    try:
        return cache_size(args.cache_config, args.response_cache_byte_size)
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
