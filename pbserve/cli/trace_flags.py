"""tritonserver's trace flags: `--trace-config [triton,]<setting>=<value>` (repeatable)
and the older `--trace-file`, `--trace-level`, `--trace-rate`, `--trace-count`,
`--trace-log-frequency`; they make the global trace setting (core/observability/tracing.py).
`mode=opentelemetry` with `opentelemetry,url=...`, `opentelemetry,resource=key=value`
(repeatable) and `opentelemetry,bsp_*=N` exports spans instead (otel_trace.py)."""

from __future__ import annotations

import argparse

from pbserve.core.observability import otel_trace
from pbserve.core.observability.tracing import LEVELS, TRACER, TraceSetting


def add_trace_flags(flags: argparse._ActionsContainer) -> None:
    """Add --trace-config to `flags` (a parser or one of its groups)."""
    flags.add_argument(
        "--trace-config", action="append", default=[], metavar="[MODE,]SETTING=VALUE",
        help="rate=N, level=TIMESTAMPS|TENSORS|OFF (repeatable), count=N, "
             "mode=triton|opentelemetry, triton,file=PATH, triton,log-frequency=N, "
             "opentelemetry,url=URL, opentelemetry,resource=KEY=VALUE (repeatable), "
             "opentelemetry,bsp_max_queue_size|bsp_schedule_delay|bsp_max_export_batch_size=N")


def add_deprecated_trace_flags(flags: argparse._ActionsContainer) -> None:
    """Add tritonserver's older trace flags (each a --trace-config setting) to `flags`."""
    add = flags.add_argument
    add("--trace-file", default=None, help="--trace-config triton,file=PATH")
    add("--trace-level", action="append", default=None,
        help="--trace-config level=TIMESTAMPS|TENSORS|OFF (repeatable)")
    add("--trace-rate", type=int, default=None, help="--trace-config rate=N")
    add("--trace-count", type=int, default=None, help="--trace-config count=N")
    add("--trace-log-frequency", type=int, default=None,
        help="--trace-config triton,log-frequency=N")


def trace_mode(args: argparse.Namespace) -> tuple[str, list[tuple[str, str]]]:
    """The flags' mode ("triton" or "opentelemetry") and their opentelemetry settings."""
    mode, otel = "triton", []
    for entry in args.trace_config:
        entry_mode, sep, pair = entry.partition(",")
        if sep and entry_mode == "opentelemetry":
            key, _, value = pair.partition("=")
            if key not in otel_trace.SETTINGS:
                raise ValueError(f"--trace-config {entry}: unknown opentelemetry setting "
                                 f"'{key}' (one of {', '.join(otel_trace.SETTINGS)})")
            otel.append((key, value))
        elif not sep and entry.startswith("mode="):
            mode = entry[len("mode="):]
            if mode not in ("triton", "opentelemetry"):
                raise ValueError(f"--trace-config {entry}: the trace mode is 'triton' or "
                                 f"'opentelemetry'")
    return mode, otel


def trace_setting(args: argparse.Namespace) -> TraceSetting:
    """The global setting of the flags (ValueError for one pbserve cannot take)."""
    setting = TraceSetting()
    levels: list[str] = list(args.trace_level or [])
    for entry in args.trace_config:
        if entry.startswith("opentelemetry,"):
            continue  # trace_mode's
        mode, _, pair = entry.partition(",") if "," in entry else ("", "", entry)
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--trace-config option format is '<mode>,<setting>=<value>' "
                             f"or '<setting>=<value>'. Got {entry}")
        if mode not in ("", "triton"):
            raise ValueError(f"--trace-config {entry}: unknown trace mode '{mode}' "
                             f"(triton or opentelemetry)")
        if key == "level":
            levels.append(value)
        elif key in ("rate", "count", "log-frequency"):
            setattr(setting, {"rate": "trace_rate", "count": "trace_count",
                              "log-frequency": "log_frequency"}[key], int(value))
        elif key == "file":
            setting.trace_file = value
    for name, value in (("trace_file", args.trace_file), ("trace_rate", args.trace_rate),
                        ("trace_count", args.trace_count),
                        ("log_frequency", args.trace_log_frequency)):
        if value is not None:
            setattr(setting, name, value)
    if any(level not in LEVELS + ("OFF",) for level in levels):
        raise ValueError(f"unknown trace level in {levels}: TIMESTAMPS, TENSORS or OFF")
    setting.trace_level = tuple(lv for lv in LEVELS if lv in levels and "OFF" not in levels)
    return setting


def configure_tracing(args: argparse.Namespace) -> None:
    """Make the flags' setting the global one (ValueError as `trace_setting`); in mode
    opentelemetry, start its exporter."""
    setting = trace_setting(args)
    mode, otel = trace_mode(args)
    TRACER.configure(setting, otel_trace.OtelExport(otel) if mode == "opentelemetry" else None)
