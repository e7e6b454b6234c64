"""pbserve's flags for the gRPC transport's timeouts and caps (GrpcLimits; tritonserver
has none of them: grpc-core's own bounds apply there)."""

from __future__ import annotations

import argparse

from pbserve.server.grpc.h2.limits import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_PENDING,
    DEFAULT_MAX_PENDING_PER_CONNECTION,
    DEFAULT_SEND_TIMEOUT_S,
    GrpcLimits,
)


def add_grpc_limit_flags(flags: argparse._ActionsContainer) -> None:
    """Add the gRPC transport's limit flags to `flags` (a parser or one of its groups)."""
    add = flags.add_argument
    add("--grpc-header-timeout-secs", type=float, default=DEFAULT_HEADER_TIMEOUT_S,
        help="pbserve: seconds an HTTP/2 header block may take to arrive (0: no limit)")
    add("--grpc-body-timeout-secs", type=float, default=DEFAULT_BODY_TIMEOUT_S,
        help="pbserve: longest pause, in seconds, within a frame or a request message "
             "(0: no limit)")
    add("--grpc-idle-timeout-secs", type=float, default=DEFAULT_IDLE_TIMEOUT_S,
        help="pbserve: seconds a gRPC connection with no call stays open (0: no limit)")
    add("--grpc-send-timeout-secs", type=float, default=DEFAULT_SEND_TIMEOUT_S,
        help="pbserve: seconds a response may wait for a client that reads nothing "
             "(0: no limit)")
    add("--grpc-max-connections", type=int, default=None,
        help="pbserve: open gRPC connections at most; default: the file descriptor "
             "limit less a quarter of it (at least 64)")
    add("--grpc-max-pending-per-connection", type=int,
        default=DEFAULT_MAX_PENDING_PER_CONNECTION,
        help="pbserve: requests read from one connection and not answered yet; past it "
             "the connection stops reading (flow control slows the client)")
    add("--grpc-max-pending", type=int, default=DEFAULT_MAX_PENDING,
        help="pbserve: as --grpc-max-pending-per-connection, for the whole server")


def grpc_limits(args: argparse.Namespace) -> GrpcLimits:
    """The gRPC limits the flags ask for; SystemExit with the flag's error if invalid."""
    try:
        return GrpcLimits(header_timeout_s=args.grpc_header_timeout_secs,
                          body_timeout_s=args.grpc_body_timeout_secs,
                          idle_timeout_s=args.grpc_idle_timeout_secs,
                          send_timeout_s=args.grpc_send_timeout_secs,
                          max_connections=args.grpc_max_connections,
                          max_pending_per_connection=args.grpc_max_pending_per_connection,
                          max_pending=args.grpc_max_pending)
    except ValueError as exc:
        raise SystemExit(f"Error: {exc}") from None
