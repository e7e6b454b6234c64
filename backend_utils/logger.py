"""`Logger`: a model's log lines, routed to the server log with the caller's file:line.

Outside a running model (auto-complete, tests, plain import) lines go to stderr in
glog format, as Triton's stub writes them before its log channel exists.
"""

from __future__ import annotations

import enum
import os
import sys
import time
from types import FrameType

from ._runtime import get_runtime
from ._strings import as_str

VERBOSE_ENV = "PBSERVE_LOG_VERBOSE"


class LogLevel(enum.IntEnum):
    """Triton's Logger.LogLevel values."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_LEADING_CHAR = {
    LogLevel.INFO: "I",
    LogLevel.WARNING: "W",
    LogLevel.ERROR: "E",
    LogLevel.VERBOSE: "I",
}


def _verbose_enabled() -> bool:
    try:
        return int(os.environ.get(VERBOSE_ENV, "0")) > 0
    except ValueError:
        return False


def format_glog(level: LogLevel, message: str, filename: str, line: int) -> str:
    """`I1122 12:00:00.000000 <pid> file.py:42] message` (UTC, like Triton's stub)."""
    now = time.time()
    seconds = int(now)
    micros = int((now - seconds) * 1_000_000)
    tm = time.gmtime(seconds)
    return (
        f"{_LEADING_CHAR[level]}{tm.tm_mon:02d}{tm.tm_mday:02d} "
        f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}.{micros:06d} "
        f"{os.getpid()} {os.path.basename(filename)}:{line}] {message}"
    )


def _emit(message: str, level: int, frame: FrameType | None) -> None:
    message = as_str("log message", message)
    if not isinstance(level, LogLevel):  # an int is refused, as by Triton's binding
        raise TypeError(f"log level must be a Logger.LogLevel, got {level!r}")
    level = LogLevel(level)
    filename = frame.f_code.co_filename if frame is not None else "<unknown>"
    line = frame.f_lineno if frame is not None else 0
    runtime = get_runtime()
    if runtime is not None:
        runtime.log(int(level), message, filename, line)
        return
    if level is LogLevel.VERBOSE and not _verbose_enabled():
        return
    sys.stderr.write(format_glog(level, message, filename, line) + "\n")
    sys.stderr.flush()


class Logger:
    """Static logging API: `Logger.log(msg, Logger.WARNING)`, `Logger.log_info(msg)`, ..."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        _emit(message, level, sys._getframe(1))

    @staticmethod
    def log_info(message: str) -> None:
        _emit(message, LogLevel.INFO, sys._getframe(1))

    @staticmethod
    def log_warn(message: str) -> None:
        _emit(message, LogLevel.WARNING, sys._getframe(1))

    @staticmethod
    def log_error(message: str) -> None:
        _emit(message, LogLevel.ERROR, sys._getframe(1))

    @staticmethod
    def log_verbose(message: str) -> None:
        _emit(message, LogLevel.VERBOSE, sys._getframe(1))
