"""The argument parser: tritonserver's flags and pbserve's own (the trace flags and
the ignored ones have their tables in trace_flags.py and ignored_flags.py)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import os

from pbserve.backend.instances.outage import RESTART_WAIT_S
from pbserve.cli.grpc_flags import add_grpc_limit_flags
from pbserve.backend.instances.rate_limiter import parse_resource
from pbserve.cli.ignored_flags import add_ignored_flags
from pbserve.cli.trace_flags import add_trace_flags
from pbserve.secret_env import PLANE_PASSWORD_ENV, PLANE_TOKEN_ENV
from pbserve.server.grpc.server import TRANSPORTS
from pbserve.server.http.limits import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    DEFAULT_MAX_INPUT_SIZE,
)
from pbserve.server.restrictions import CATEGORIES


def _bool(text: str) -> bool:
    """tritonserver's booleans: 1, true, yes or on (any case); anything else is false."""
    return text.lower() in ("1", "true", "yes", "on")


def build_parser() -> argparse.ArgumentParser:
    """Every flag pbserve takes, with tritonserver's defaults where it has the flag."""
    parser = argparse.ArgumentParser(
        prog="pbserve", description="Serve Triton Python-backend models (tritonserver's flags).")
    add = parser.add_argument
    add("--model-repository", "--model-store", action="append", default=[],
        dest="model_repository", help="model repository directory, or s3://, gs://, "
                                      "as:// (repeatable); required unless "
                                      "--request-plane is given")
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
    add_grpc_limit_flags(parser)
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
    add("--model-namespacing", type=_bool, nargs="?", const=True, default=False,
        help="a model name found in several repositories is a model per repository: an "
             "ensemble calls its own repository's; a client cannot name them (as "
             "tritonserver)")
    add("--cuda-memory-pool-byte-size", action="append", default=[],
        metavar="<GPU>:<BYTES>",
        help="each stub's CUDA pool on that GPU: its first allocation and what it grows "
             "by (default 64 MiB; docs/gpu.md); repeatable, one per GPU")
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
    add("--cache-config", action="append", default=None, metavar="<cache>,<key>=<value>",
        help="the response cache: local,size=<bytes> (models enable it with "
             "response_cache { enable: true })")
    add("--response-cache-byte-size", default=None, metavar="BYTES",
        help="deprecated: --cache-config local,size=BYTES")
    add("--stub-zygote", type=_bool, default=True,
        help="pbserve's: true forks each stub from a zygote process that imported "
             "numpy and the model API once (fast, shares that memory); false starts "
             "each as its own `python -m stub`")
    add("--rate-limit", default="off", metavar="MODE",
        help="execution_count: an instance whose group has rate_limiter config starts an "
             "execution only when its resources are free, in priority order; off (default)")
    add("--rate-limit-resource", action="append", default=[],
        metavar="<resource_name>:<count>[:<device>]",
        help="the copies of a rate-limiter resource (per device, or on <device>); by "
             "default the most any loaded instance asks for")
    add("--model-debug", default="", metavar="MODEL",
        help="pbserve: MODEL runs a single instance whose stub has this terminal: "
             "breakpoint() in its model.py opens pdb here (run in the foreground)")
    add("--model-debug-port", default="", metavar="[HOST:]PORT",
        help="pbserve: the --model-debug model's stub starts debugpy listening here for "
             "an IDE to attach (the [debug] extra); breakpoint() stops in the IDE")
    add_trace_flags(parser)
    add_ignored_flags(parser)
    return parser


def check_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`parser.error` (exit status 2) for flags that parse but do not fit together."""
    if not args.model_repository and not args.request_plane:
        parser.error("--model-repository is required (or --request-plane, for a frontend)")
    if args.rate_limit.lower() not in ("execution_count", "off"):
        parser.error("invalid argument for --rate-limit")
    for resource in args.rate_limit_resource:
        try:
            parse_resource(resource)
        except ValueError as err:
            parser.error(str(err))
    if args.model_debug_port and not args.model_debug:
        parser.error("--model-debug-port needs --model-debug <model>")
    if args.model_debug_port and importlib.util.find_spec("debugpy") is None:
        parser.error("--model-debug-port needs debugpy: pip install 'pbserve[debug]'")
    if args.model_debug and not args.model_debug_port and not sys.stdin.isatty():
        parser.error("--model-debug needs pbserve in the foreground of a terminal "
                     "(its stdin is not one), or --model-debug-port")
    if args.plane_inline_max_bytes < 0 or args.data_plane_ttl_secs <= 0:
        parser.error("--plane-inline-max-bytes must be >= 0 and --data-plane-ttl-secs > 0")
    port = args.data_plane_address.rpartition(":")[2] if ":" in args.data_plane_address \
        and not args.data_plane_address.endswith("]") else "0"
    if not port.isdigit() or int(port) > 65535:
        parser.error(f"--data-plane-address '{args.data_plane_address}': expected "
                     f"HOST[:PORT] (an IPv6 HOST in brackets)")
