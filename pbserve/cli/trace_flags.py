"""tritonserver's trace flags: `--trace-config [triton,]<setting>=<value>` (repeatable)
and the older `--trace-file`, `--trace-level`, `--trace-rate`, `--trace-count`,
`--trace-log-frequency`; they make the global trace setting (backend/observability/tracing.py)."""

from __future__ import annotations

import argparse

from pbserve.backend.observability.tracing import LEVELS, TRACER, TraceSetting


def add_trace_flags(parser: argparse.ArgumentParser) -> None:
    """Add the trace flags to `parser`."""
    add = parser.add_argument
    add("--trace-config", action="append", default=[], metavar="[MODE,]SETTING=VALUE",
        help="rate=N, level=TIMESTAMPS|TENSORS|OFF (repeatable), count=N, mode=triton, "
             "triton,file=PATH, triton,log-frequency=N")
    add("--trace-file", default=None)
    add("--trace-level", action="append", default=None)
    add("--trace-rate", type=int, default=None)
    add("--trace-count", type=int, default=None)
    add("--trace-log-frequency", type=int, default=None)


def trace_setting(args: argparse.Namespace) -> TraceSetting:
    """The global setting of the flags (ValueError for one pbserve cannot take)."""
    setting = TraceSetting()
    levels: list[str] = list(args.trace_level or [])
    for entry in args.trace_config:
        mode, _, pair = entry.rpartition(",")
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--trace-config option format is '<mode>,<setting>=<value>' "
                             f"or '<setting>=<value>'. Got {entry}")
        if mode not in ("", "triton"):
            raise ValueError(f"--trace-config {entry}: pbserve traces in mode 'triton' only")
        if key == "mode" and value != "triton":
            raise ValueError(f"--trace-config {entry}: pbserve traces in mode 'triton' only")
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
    """Make the flags' setting the global one (ValueError as `trace_setting`)."""
    TRACER.configure(trace_setting(args))
