"""What a stub asks of the core so as to send BLS calls to other stubs itself
(stub/direct_bls.py): the callee's route (a CALL, `bls_route`), what its calls added to
the callee's statistics and which of them to cancel (NOTIFYs, `direct_stats` and
`cancel_direct`); and, when a caller's stub ends, its queues at the callees go
(`caller_gone`). On the event loop's thread."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from pbserve.core.stub_calls.caller import Caller
from pbserve.errors import ServerError


class DirectCalls:
    """`find_model(name, version)`: the loaded model a call names (ServerError if none)."""

    def __init__(self, find_model: Callable[[str, str], Any]) -> None:
        self._find_model = find_model
        # id(caller) -> its stub's origin -> the stub processes that made queues for it
        self._callees: dict[int, dict[int, weakref.WeakSet]] = {}

    def answers(self) -> dict[str, Callable[..., Any]]:
        return {"bls_route": self.route}

    def notices(self) -> dict[str, Callable[..., None]]:
        return {"direct_stats": self.add_stats, "cancel_direct": self.cancel}

    def route(self, caller: Caller, name: str, version: str) -> tuple | None:
        """(the caller's origin, Model.caller_route's route), or None: the calls go
        through the core (a model that does not qualify, an ensemble, a model of another
        process, a caller without a bell)."""
        origin = caller.direct_origin()
        if origin is None:
            return None
        try:
            model = self._find_model(name, version)
        except ServerError:
            return None
        caller_route = getattr(model, "caller_route", None)  # an ensemble has none
        answer = None if caller_route is None else caller_route(caller, *origin)
        if answer is None:
            return None
        route, processes = answer
        self._callees.setdefault(id(caller), {}).setdefault(
            origin[0], weakref.WeakSet()).update(processes)
        return (origin[0], *route)

    def add_stats(self, caller: Caller, entries: tuple) -> None:
        """DirectPath's statistics entries, of a stub's direct calls."""
        for model, version, *figures in entries:
            try:
                self._find_model(model, version).add_direct_stats(*figures)
            except ServerError:
                pass  # unloaded meanwhile

    def cancel(self, caller: Caller, model: str, version: str, instance: str,
               key: int) -> None:
        """A direct call `key` of the caller was cancelled (the request it serves was)."""
        try:
            self._find_model(model, version).cancel_direct(instance, key)
        except ServerError:
            pass

    def caller_gone(self, caller: Caller) -> None:
        """The caller's stub ended: its queues at every callee go."""
        for origin, processes in self._callees.pop(id(caller), {}).items():
            for process in processes:
                process.caller_gone(origin)
