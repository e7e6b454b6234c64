"""The server's log settings (Triton's logging extension): one set per process.

`SERVER_LOG` holds what `--log-*` set and what `/v2/logging` (gRPC `LogSettings`)
changes later. Applying a change reconfigures the parent's root logger (its handler,
format and level filter) and tells every running stub (`LOG_SETTINGS` on its control
queue); a stub started later is told before its model is imported.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Protocol

from pbserve.errors import ErrorCode, ServerError

FORMATS = ("default", "ISO8601")
VERBOSE_ENV = "PBSERVE_LOG_VERBOSE"  # read by backend_utils.logger outside a runtime
_FILE_UNSUPPORTED = "log file location can not be updated through network protocol"


@dataclass
class LogSettings:
    """Triton's six log settings, with its defaults."""

    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"
    generation: int = field(default=0, compare=False)  # changes so far (stubs: which is newer)

    def as_dict(self) -> dict[str, Any]:
        return {"log_file": self.log_file, "log_info": self.log_info,
                "log_warning": self.log_warning, "log_error": self.log_error,
                "log_verbose_level": self.log_verbose_level, "log_format": self.log_format}

    def stub_message_fields(self) -> tuple[int, int, bool, bool, bool]:
        """What a stub needs: (generation, verbose level, info, warning, error)."""
        return (self.generation, self.log_verbose_level, self.log_info, self.log_warning,
                self.log_error)


class LogListener(Protocol):
    def apply_log_settings(self, settings: LogSettings) -> None: ...


class _LevelFilter(logging.Filter):
    """Triton's switches: verbose (DEBUG) lines need a level > 0; INFO, WARNING and
    ERROR (and CRITICAL) lines each have their own switch."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.settings = settings

    def filter(self, record: logging.LogRecord) -> bool:
        s = self.settings
        if record.levelno < logging.INFO:
            return s.log_verbose_level > 0
        if record.levelno < logging.WARNING:
            return s.log_info
        if record.levelno < logging.ERROR:
            return s.log_warning
        return s.log_error


class _Formatter(logging.Formatter):
    """`default`: `I1124 22:06:06.123456 <pid> <logger> <message>` (glog's heading);
    `ISO8601`: `2026-11-24T22:06:06Z I <pid> <logger> <message>`."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.settings = settings

    def format(self, record: logging.LogRecord) -> str:
        letter = "I" if record.levelno < logging.WARNING else record.levelname[0]
        tm = time.gmtime(record.created)
        if self.settings.log_format == "ISO8601":
            head = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', tm)} {letter} {record.process}"
        else:
            micros = int((record.created % 1) * 1_000_000)
            head = f"{letter}{time.strftime('%m%d %H:%M:%S', tm)}.{micros:06d} {record.process}"
        text = f"{head} {record.name} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            text += "\n" + self.formatStack(record.stack_info)
        return text


class ServerLog:
    """The process's log settings and the handler that follows them."""

    def __init__(self) -> None:
        self.settings = LogSettings()
        # log_verbose_level > 0: the one bool the request paths check before their
        # verbose lines (pbserve/server/request_log.py)
        self.verbose = False
        self._handler: logging.Handler | None = None
        self._listeners: weakref.WeakSet = weakref.WeakSet()

    def install(self, settings: LogSettings) -> None:
        """Configure the root logger from the command line's settings (OSError when
        `log_file` cannot be opened)."""
        self.settings = settings
        handler: logging.Handler = (logging.FileHandler(settings.log_file, mode="a")
                                    if settings.log_file else logging.StreamHandler(sys.stderr))
        handler.addFilter(_LevelFilter(settings))
        handler.setFormatter(_Formatter(settings))
        root = logging.getLogger()
        if self._handler is not None:
            root.removeHandler(self._handler)
            self._handler.close()
        for old in list(root.handlers):
            root.removeHandler(old)
        root.addHandler(handler)
        self._handler = handler
        self._apply_level()

    def _apply_level(self) -> None:
        verbose = self.verbose = self.settings.log_verbose_level > 0
        logging.getLogger().setLevel(logging.DEBUG if verbose else logging.INFO)
        os.environ[VERBOSE_ENV] = str(self.settings.log_verbose_level)

    def attach(self, listener: LogListener) -> None:
        """`listener` (a model instance) is told of every later change."""
        self._listeners.add(listener)

    def detach(self, listener: LogListener) -> None:
        self._listeners.discard(listener)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply a request's settings, Triton's way: validated one by one in Triton's
        order (settings before a bad one stay applied), then every stub is told."""
        try:
            for name in ("log_file", "log_info", "log_warning", "log_error",
                         "log_verbose_level", "log_format"):
                if name in changes:
                    _set(self.settings, name, changes[name])
        finally:
            self.settings.generation += 1
            self._apply_level()
            for listener in list(self._listeners):
                listener.apply_log_settings(self.settings)
        return self.settings.as_dict()


def _set(settings: LogSettings, name: str, value: Any) -> None:
    """One setting from a JSON or protobuf value (None: left as it is, as Triton's
    HTTP frontend does for a JSON null)."""
    if value is None:
        return
    if name == "log_file":
        raise ServerError(ErrorCode.UNSUPPORTED, _FILE_UNSUPPORTED)
    if name == "log_verbose_level":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SettingTypeError(name, "uint")
        settings.log_verbose_level = value
    elif name == "log_format":
        if not isinstance(value, str):
            raise SettingTypeError(name, "string")
        if value not in FORMATS:
            raise LogFormatError(value)
        settings.log_format = value
    else:
        if not isinstance(value, bool):
            raise SettingTypeError(name, "bool")
        setattr(settings, name, value)


class LogFormatError(ServerError):
    """A `log_format` that is neither "default" nor "ISO8601". Triton's frontends word
    it differently: HTTP (this message) is UNAVAILABLE, gRPC INVALID_ARG."""

    def __init__(self, value: str) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, f"invalid argument for --log_format, got: {value}")
        self.value = value


class SettingTypeError(ServerError):
    """A setting of the wrong type (HTTP's wording here; gRPC words it its own way)."""

    def __init__(self, name: str, expected: str) -> None:
        super().__init__(ErrorCode.INVALID_ARG, _JSON_TYPE_ERRORS[expected])
        self.name = name
        self.expected = expected


# Triton's HTTP frontend reads the values with TritonJson, whose errors these are.
_JSON_TYPE_ERRORS = {
    "bool": "attempt to access JSON non-boolean as boolean",
    "uint": "attempt to access JSON non-unsigned-integer as unsigned-integer",
    "string": "attempt to access JSON non-string as string",
}

SERVER_LOG = ServerLog()
