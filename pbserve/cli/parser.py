"""The argument parser: tritonserver's flags, in tritonserver's groups, and pbserve's
own (the trace, gRPC limit, request plane and ignored flags have their tables in
trace_flags.py, grpc_flags.py, plane_flags.py and ignored_flags.py; how --help and
errors read: help_format.py)."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from pbserve.core.instances.outage import RESTART_WAIT_S
from pbserve.core.observability.cpu_metrics import DEFAULT_INTERVAL_MS
from pbserve.cli.grpc_flags import add_grpc_limit_flags
from pbserve.core.scheduling.rate_limiter import parse_resource
from pbserve.cli.help_format import Parser
from pbserve.cli.ignored_flags import add_ignored_flags
from pbserve.cli.openai_flags import add_openai_flags, check_openai_flags
from pbserve.cli.plane_flags import add_plane_flags
from pbserve.cli.trace_flags import add_deprecated_trace_flags, add_trace_flags
from pbserve.server.grpc.server import TRANSPORTS
from pbserve.server.http.limits import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    DEFAULT_MAX_INPUT_SIZE,
)
from pbserve.server.restrictions import CATEGORIES
from stub.frontends import FIRST_STUB_ORIGIN

Flags = argparse._ActionsContainer  # a parser, or one of its groups


def _bool(text: str) -> bool:
    """tritonserver's booleans: 1, true, yes or on (any case); anything else is false."""
    return text.lower() in ("1", "true", "yes", "on")


BOOL = {"type": _bool, "metavar": "<boolean>"}


def build_parser() -> argparse.ArgumentParser:
    """Every flag pbserve takes, with tritonserver's defaults where it has the flag, in
    tritonserver's --help groups; pbserve's own in groups of their own."""
    parser = Parser("pbserve", "Serve Triton Python-backend models (tritonserver's flags).")
    group = parser.add_argument_group
    _server_flags(group("Server"))
    _logging_flags(group("Logging"))
    _repository_flags(group("Model Repository"))
    _http_flags(group("HTTP"))
    _grpc_flags(group("GRPC"))
    _metrics_flags(group("Metrics"))
    add_trace_flags(group("Tracing"))
    _backend_flags(group("Backend"))
    _cache_flags(group("Response Cache"))
    _rate_limiter_flags(group("Rate Limiter"))
    _memory_flags(group("Memory/Device Management"))
    _deprecated_flags(group("DEPRECATED"))
    _pbserve_flags(group("pbserve", "pbserve's own flags (tritonserver has none of them)"))
    add_openai_flags(group("pbserve: OpenAI endpoint",
                           "an OpenAI-compatible API beside the KServe endpoints "
                           "(docs/openai.md)"))
    add_plane_flags(group("pbserve: request plane",
                          "serving over NATS, on several machines (docs/distributed.md)"))
    ignored = group("Accepted and ignored",
                    "tritonserver's flags for what only the C++ server has; each one given "
                    "is named in a warning:")
    ignored.description += " " + ", ".join(add_ignored_flags(ignored))
    return parser


def _server_flags(flags: Flags) -> None:
    add = flags.add_argument
    add("--exit-timeout-secs", type=float, default=30.0,
        help="on SIGINT/SIGTERM: how long requests in flight may take to finish before "
             "they are ended with an error and the models are unloaded")
    add("--allow-client-shm", **BOOL, default=True,
        help="let clients register and use shared-memory regions (Triton's system shared "
             "memory extension); false refuses them as Triton does")


def _logging_flags(flags: Flags) -> None:
    add = flags.add_argument
    add("--log-verbose", type=int, default=0,
        help="verbose logging level: 0 disables verbose logging, 1 and more enable it")
    add("--log-info", **BOOL, default=True, help="enable info-level logging")
    add("--log-warning", **BOOL, default=True, help="enable warning-level logging")
    add("--log-error", **BOOL, default=True, help="enable error-level logging")
    add("--log-format", choices=["default", "ISO8601"], default="default",
        help="default: each line starts 'LMMDD hh:mm:ss.ssssss'; ISO8601: "
             "'YYYY-MM-DDThh:mm:ssZ L'")
    add("--log-file", default="", help="append the log to this file instead of stderr")


def _repository_flags(flags: Flags) -> None:
    add = flags.add_argument
    add("--model-repository", "--model-store", action="append", default=[],
        dest="model_repository", help="model repository directory, or s3://, gs://, "
                                      "as:// (repeatable); required unless "
                                      "--request-plane is given")
    add("--exit-on-error", **BOOL, default=True,
        help="exit when a model fails to load at start-up")
    add("--disable-auto-complete-config", action="store_true",
        help="models' auto_complete_config is not run: each config.pbtxt must be complete")
    add("--strict-readiness", **BOOL, default=True,
        help="true: /v2/health/ready is ready when every model is; false: when the "
             "server answers, whatever the models")
    add("--model-control-mode", choices=["none", "explicit", "poll"], default="none",
        help="none: load every model at start-up, nothing after; poll: load and unload "
             "as the repositories change; explicit: the model control API loads and "
             "unloads (--load-model at start-up)")
    add("--repository-poll-secs", type=float, default=15.0,
        help="poll mode: seconds between two looks at the repositories")
    add("--load-model", action="append", default=[],
        help="model to load at start-up in explicit mode (repeatable, '*' for all)")
    add("--model-load-thread-count", type=int, default=4,
        help="models loaded at once at start-up")
    add("--model-namespacing", **BOOL, nargs="?", const=True, default=False,
        help="a model name found in several repositories is a model per repository: an "
             "ensemble calls its own repository's; a client cannot name them (as "
             "tritonserver)")


def _http_flags(flags: Flags) -> None:
    add = flags.add_argument
    add("--allow-http", **BOOL, default=True, help="listen for HTTP requests")
    add("--http-address", default="127.0.0.1", help="the address the HTTP server binds to")
    add("--http-port", type=int, default=8000, help="the port the HTTP server listens on")
    add("--http-max-input-size", type=int, default=DEFAULT_MAX_INPUT_SIZE,
        help="most bytes of tensor data (and, apart, of JSON header) a request may carry, "
             "as sent and decompressed; a gRPC message received may be twice as large")
    add("--http-restricted-api", action="append", default=[],
        help="<api>[,<api>...]:<key>=<value>: requests to these APIs must carry header "
             f"<key> with <value> (repeatable); APIs: {', '.join(CATEGORIES)}")
    add("--http-header-timeout-secs", type=float, default=DEFAULT_HEADER_TIMEOUT_S,
        help="pbserve: seconds a request's head may take to arrive (0: no limit)")
    add("--http-body-timeout-secs", type=float, default=DEFAULT_BODY_TIMEOUT_S,
        help="pbserve: longest pause, in seconds, within a request body (0: no limit)")
    add("--http-keepalive-timeout-secs", type=float, default=DEFAULT_KEEPALIVE_TIMEOUT_S,
        help="pbserve: seconds an idle connection stays open (0: no limit)")
    add("--http-max-connections", type=int, default=None,
        help="pbserve: open HTTP connections at most; default: the file descriptor "
             "limit less a quarter of it (at least 64)")
    _tls_flags(flags, "http", "pbserve's (tritonserver has no HTTP TLS)")


def _tls_flags(flags: Flags, proto: str, whose: str) -> None:
    add = flags.add_argument
    add(f"--{proto}-use-ssl", **BOOL, nargs="?", const=True, default=False,
        help=f"{whose}: serve {proto.upper()} over TLS")
    add(f"--{proto}-use-ssl-mutual", **BOOL, nargs="?", const=True, default=False,
        help="TLS, and clients must present a certificate the root certificate signed")
    add(f"--{proto}-server-cert", default=None, help="PEM server certificate (chain)")
    add(f"--{proto}-server-key", default=None, help="PEM server key")
    add(f"--{proto}-root-cert", default=None,
        help="PEM root certificate(s) client certificates are verified against")


def _grpc_flags(flags: Flags) -> None:
    add = flags.add_argument
    add("--allow-grpc", **BOOL, default=True, help="listen for gRPC requests")
    add("--grpc-address", default="127.0.0.1", help="the address the gRPC server binds to")
    add("--grpc-port", type=int, default=8001, help="the port the gRPC server listens on")
    _tls_flags(flags, "grpc", "tritonserver's")
    add("--grpc-restricted-protocol", action="append", default=[],
        help="<protocol>[,...]:<key>=<value>: calls to these protocols must carry "
             "metadata triton-grpc-protocol-<key> with <value> (repeatable)")
    add("--grpc-transport", choices=TRANSPORTS, default="zttp",
        help="pbserve: the HTTP/2 implementation under the gRPC endpoint: grpcio, or "
             "zttp (a sans-IO HTTP/2 engine in Zig; faster, see docs/performance.md)")
    add_grpc_limit_flags(flags)


def _metrics_flags(flags: Flags) -> None:
    add = flags.add_argument
    add("--allow-metrics", **BOOL, default=True, help="serve Prometheus metrics")
    add("--metrics-address", default="127.0.0.1",
        help="the address the metrics server binds to")
    add("--metrics-port", type=int, default=8002,
        help="the port the metrics server (GET /metrics) listens on")
    add("--allow-cpu-metrics", **BOOL, default=True,
        help="export CPU utilization and memory (nv_cpu_*); ignored unless "
             "--allow-metrics is true")
    add("--metrics-interval-ms", type=int, default=DEFAULT_INTERVAL_MS,
        help="how often CPU metrics are collected, in milliseconds (polled every half "
             "interval, as tritonserver)")


def _backend_flags(flags: Flags) -> None:
    add = flags.add_argument
    add("--backend-directory", default=None,
        help="where Python-based backends live: a model with backend: \"<name>\" runs "
             "<dir>/<name>/model.py (default /opt/tritonserver/backends, as tritonserver); "
             "pbserve's built-in onnxruntime and pytorch backends are found first")
    add("--backend-config", action="append", default=[],
        help="<backend>,<setting>=<value>: python,default-max-batch-size=N, "
             "python,shm-default-byte-size=N (each pool's first region, default 1 MiB) and "
             "python,shm-growth-byte-size=N (what a pool grows by, default 1 MiB) are used; "
             "other settings are accepted and ignored")


def _cache_flags(flags: Flags) -> None:
    flags.add_argument(
        "--cache-config", action="append", default=None, metavar="<cache>,<key>=<value>",
        help="the response cache: local,size=<bytes>, or redis,host=<host> and redis,port=<n> "
             "with Triton's redis_cache settings (docs/response_cache.md); models enable "
             "it with response_cache { enable: true }")


def _rate_limiter_flags(flags: Flags) -> None:
    add = flags.add_argument
    add("--rate-limit", default="off", metavar="MODE",
        help="execution_count: an instance whose group has rate_limiter config starts an "
             "execution only when its resources are free, in priority order; off: no "
             "rate limiting")
    add("--rate-limit-resource", action="append", default=[],
        metavar="<resource_name>:<count>[:<device>]",
        help="the copies of a rate-limiter resource (per device, or on <device>); by "
             "default the most any loaded instance asks for")


def _memory_flags(flags: Flags) -> None:
    flags.add_argument(
        "--cuda-memory-pool-byte-size", action="append", default=[], metavar="<GPU>:<BYTES>",
        help="each stub's CUDA pool on that GPU: its first allocation and what it grows "
             "by (default 64 MiB; docs/gpu.md); repeatable, one per GPU")


def _deprecated_flags(flags: Flags) -> None:
    add = flags.add_argument
    add("--strict-model-config", **BOOL, default=None,
        help="true: as --disable-auto-complete-config; false: auto-complete")
    add("--response-cache-byte-size", default=None, metavar="BYTES",
        help="--cache-config local,size=BYTES")
    add_deprecated_trace_flags(flags)


def _pbserve_flags(flags: Flags) -> None:
    add = flags.add_argument
    add("--model-config-defaults", default=None, metavar="FILE",
        help="a partial config.pbtxt whose fields every model gets unless it sets them "
             "(see docs/configuration.md)")
    add("--restart-wait-secs", type=float, default=RESTART_WAIT_S,
        help="how long requests queued for a model whose every instance is down (its "
             "stub died, restarts fail) wait for one to come back before they fail with "
             "UNAVAILABLE; new requests are then refused until one is back")
    add("--frontend-processes", type=int, default=1, metavar="N",
        help="N >= 2 parses and answers HTTP and gRPC in N processes of their own, in "
             "front of this one, which keeps the models (docs/frontend_processes.md); 1 "
             "serves them in this process")
    add("--stub-zygote", **BOOL, default=True,
        help="true forks each stub from a zygote process that imported numpy and the "
             "model API once (and, for ONNX, TorchScript and OpenVINO models, their "
             "framework): fast, shares that memory; false starts each as its own "
             "`python -m stub`")
    add("--model-debug", default="", metavar="MODEL",
        help="MODEL runs a single instance whose stub has this terminal: breakpoint() in "
             "its model.py opens pdb here (run in the foreground)")
    add("--model-debug-port", default="", metavar="[HOST:]PORT",
        help="the --model-debug model's stub starts debugpy listening here for an IDE to "
             "attach (the [debug] extra); breakpoint() stops in the IDE")


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
    if args.metrics_interval_ms < 1:
        parser.error("--metrics-interval-ms must be at least 1")
    if not 1 <= args.frontend_processes < FIRST_STUB_ORIGIN:
        parser.error(f"--frontend-processes must be at least 1 and below "
                     f"{FIRST_STUB_ORIGIN}")
    if args.frontend_processes > 1 and not args.model_repository:
        parser.error("--frontend-processes needs --model-repository (the core's models)")
    if args.frontend_processes > 1 and args.allow_grpc and args.grpc_transport != "zttp":
        parser.error("--frontend-processes above 1 needs --grpc-transport zttp (grpcio "
                     "binds its port by itself)")
    if openai_error := check_openai_flags(args):
        parser.error(openai_error)
    if args.plane_inline_max_bytes < 0 or args.data_plane_ttl_secs <= 0:
        parser.error("--plane-inline-max-bytes must be >= 0 and --data-plane-ttl-secs > 0")
    port = args.data_plane_address.rpartition(":")[2] if ":" in args.data_plane_address \
        and not args.data_plane_address.endswith("]") else "0"
    if not port.isdigit() or int(port) > 65535:
        parser.error(f"--data-plane-address '{args.data_plane_address}': expected "
                     f"HOST[:PORT] (an IPv6 HOST in brackets)")
