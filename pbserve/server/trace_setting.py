"""A trace setting request (HTTP JSON or gRPC strings) checked as Triton's frontends
check it, into the changes `TRACER.update` applies; nothing changes on an error."""

from __future__ import annotations

import inspect
import re
from typing import Any

from pbserve.core.api import InferenceCore

from pbserve.core.observability.tracing import LEVELS, TRACER
from pbserve.errors import ErrorCode, ServerError, invalid_arg

_INT = re.compile(r"\s*[+-]?\d+")  # what std::stoi reads (trailing text is ignored)
_INT32 = (-(2 ** 31), 2 ** 31 - 1)
_RANGES = {"trace_rate": (0, 2 ** 32 - 1), "trace_count": (-1, 2 ** 31 - 1),
           "log_frequency": (0, 2 ** 32 - 1)}
FILE_UNSUPPORTED = "trace file location can not be updated through network protocol"


def changes_of(settings: dict[str, Any], grpc: bool) -> dict[str, Any]:
    """`settings`: HTTP's JSON values, or gRPC's lists of strings."""
    if "trace_file" in settings:
        raise ServerError(ErrorCode.UNSUPPORTED, FILE_UNSUPPORTED)
    changes: dict[str, Any] = {}
    if "trace_level" in settings:
        value = settings["trace_level"]
        if value is None or (grpc and not value):
            changes["trace_level"] = None
        else:
            if not isinstance(value, list):
                raise invalid_arg("attempt to access JSON non-array as array")
            levels = _levels(value)
            if levels is not None:
                changes["trace_level"] = levels
    for name in ("trace_rate", "trace_count", "log_frequency"):
        if name not in settings:
            continue
        value = settings[name]
        if value is None or (grpc and not value):
            changes[name] = None
            continue
        if grpc:
            if len(value) != 1:
                raise invalid_arg(f"expect only 1 value for '{name}'")
            value = value[0]
        elif not isinstance(value, str):
            raise invalid_arg("attempt to access JSON non-string as string")
        changes[name] = _number(name, value)
    return changes


def _levels(values: list[Any]) -> tuple[str, ...] | None:
    """The levels named (unknown names are ignored, as Triton does); () is OFF; None:
    nothing to change."""
    levels: list[str] = []
    named = False
    for value in values:
        if not isinstance(value, str):
            raise invalid_arg("attempt to access JSON non-string as string")
        if value == "OFF":
            if len(values) != 1:
                raise invalid_arg("Expect only one trace level 'OFF' is specified")
            return ()
        if value in LEVELS:
            named = True
            if value not in levels:
                levels.append(value)
    return tuple(sorted(levels, key=LEVELS.index)) if named else None


def _number(name: str, text: str) -> int:
    match = _INT.match(text)
    if match is None:
        raise invalid_arg(f"Unable to parse '{name}', got: {text}")
    value = int(match.group())
    low, high = _RANGES[name]
    if not _INT32[0] <= value <= _INT32[1] or (name != "trace_count" and value < 0):
        raise invalid_arg(f"Unable to parse '{name}', value is out of range [ {low}, {high} ], "
                          f"got: {text}")
    if name == "trace_count" and value < -1:
        raise invalid_arg(f"Unable to parse 'trace_count'. Expecting value >= -1, got:{text}")
    return value


async def model_ready(core: InferenceCore, model: str) -> bool:
    """Whether `model` is ready (the core answers at once or after an await)."""
    ready = core.model_ready(model)
    return bool(await ready) if inspect.isawaitable(ready) else bool(ready)


async def apply_trace_setting(core: InferenceCore, model: str,
                              changes: dict[str, Any] | None) -> dict[str, Any]:
    """The settings of `model` ("" = the server's) after `changes` (None: none), where
    requests are traced: this process's TRACER, or the core's when the core offers
    `trace_setting` (a frontend process's LinkedCore: pbserve/frontends/)."""
    elsewhere = getattr(core, "trace_setting", None)
    if elsewhere is not None:
        return await elsewhere(model, changes)
    return TRACER.setting(model) if changes is None else TRACER.update(model, changes)
