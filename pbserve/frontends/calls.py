"""What a frontend process asks of the core besides inference: the rest of the
InferenceCore (readiness, metadata, config, the repository index and model control,
statistics, metrics, client shared-memory regions, trace settings), one CALL each,
answered by a REPLY of plain data.

`CoreCalls.run` answers on the core's loop: a method returning a value (or raising
ServerError) is answered at once, one returning an awaitable when it is done. Only the
methods in `METHODS` may be called: a frontend names them, never code.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from pbserve.core.api import InferenceCore
from pbserve.core.observability.tracing import TRACER
from pbserve.errors import ErrorCode, ServerError
from pbserve.frontends.protocol import SHARED_MEMORY_METHODS
from pbserve.server import statistics

log = logging.getLogger("pbserve.frontends")

Answer = Callable[[tuple | None, Any], None]


def _handle(core: InferenceCore, name: str, version: str) -> tuple[bool, bool]:
    handle = core.model_handle(name, version)
    return handle.decoupled, handle.batched


def _labels(core: InferenceCore, name: str, version: str, output: str) -> Any:
    return core.model_handle(name, version).output_labels(output)


def _direct_route(core: InferenceCore, name: str, version: str, slot: int) -> Any:
    """Where frontend `slot` sends the model's requests itself (loaded_model.py), or
    None: through the core (a handle without the ability: a worker's plane models)."""
    route = getattr(core.model_handle(name, version), "direct_route", None)
    return route(slot) if route is not None else None


async def _stub_ended(core: InferenceCore, name: str, version: str, instance: str,
                      pid: int) -> None:
    """Answered once the core has seen that stub end too (Model.stub_ended)."""
    handle = core.model_handle(name, version)
    ended = getattr(handle, "stub_ended", None)
    if ended is not None:
        await ended(instance, pid)


async def _statistics(core: InferenceCore, name: str, version: str) -> Any:
    """The model's statistics as the in-process frontends answer them."""
    return (await statistics.model(core, name, version))["model_stats"]


def _trace_setting(core: InferenceCore, model: str, changes: dict | None) -> dict:
    return TRACER.setting(model) if changes is None else TRACER.update(model, changes)


def _shared_memory(core: InferenceCore, method: str, args: tuple) -> Any:
    if method not in SHARED_MEMORY_METHODS:
        raise ServerError(ErrorCode.INVALID_ARG, f"unknown shared-memory call '{method}'")
    return getattr(core.shared_memory, method)(*args)



METHODS: dict[str, Callable[..., Any]] = {
    "is_ready": lambda core: core.is_ready(),
    "server_metadata": lambda core: core.server_metadata(),
    "model_ready": lambda core, name, version: core.model_ready(name, version),
    "model_metadata": lambda core, name, version: core.model_metadata(name, version),
    "model_config": lambda core, name, version: core.model_config(name, version),
    "model_handle": _handle,
    "output_labels": _labels,
    "direct_route": _direct_route,
    "stub_ended": _stub_ended,
    "repository_index": lambda core, ready_only: core.repository_index(ready_only),
    "load_model": lambda core, name, config, files: core.load_model(name, config, files),
    "unload_model": lambda core, name, dependents: core.unload_model(name, dependents),
    "model_statistics": _statistics,
    "metrics_text": lambda core: core.metrics_text(),
    "shared_memory": _shared_memory,
    "trace_setting": _trace_setting,
}


class CoreCalls:
    """Runs the calls of every frontend; `log_settings` applies a frontend's change of
    the log settings (log_settings.py SERVER_LOG.update)."""

    def __init__(self, log_settings: Callable[[dict], Any],
                 serving: Callable[[], bool] = lambda: True) -> None:
        self._tasks: set[asyncio.Task] = set()
        self._log_settings = log_settings
        self._serving = serving  # every frontend serves: part of the server's readiness

    def run(self, core: InferenceCore, method: str, args: tuple, answer: Answer) -> None:
        if method == "log_settings":
            self._answer_now(lambda: self._log_settings(*args), answer)
            return
        if method == "is_ready" and not self._serving():
            answer(None, False)
            return
        call = METHODS.get(method)
        if call is None:
            answer((int(ErrorCode.INVALID_ARG), f"unknown call '{method}'"), None)
            return
        value = self._answer_now(lambda: call(core, *args), answer, awaitable_ok=True)
        if inspect.isawaitable(value):
            task = asyncio.get_running_loop().create_task(self._await(value, answer))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _answer_now(call: Callable[[], Any], answer: Answer,
                    awaitable_ok: bool = False) -> Any:
        try:
            value = call()
        except ServerError as err:
            answer((int(err.code), err.message), None)
            return None
        except Exception as err:
            log.exception("a frontend's call failed")
            answer((int(ErrorCode.INTERNAL), str(err)), None)
            return None
        if awaitable_ok and inspect.isawaitable(value):
            return value
        answer(None, value)
        return None

    @staticmethod
    async def _await(value: Any, answer: Answer) -> None:
        try:
            result = await value
        except ServerError as err:
            answer((int(err.code), err.message), None)
            return
        except Exception as err:
            log.exception("a frontend's call failed")
            answer((int(ErrorCode.INTERNAL), str(err)), None)
            return
        answer(None, result)

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
