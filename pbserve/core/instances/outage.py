"""A model with no instance that can run: how long its requests wait for one.

Every instance of the model is restarting (its stub died, and starting a new one may keep
failing: initialize raises, the interpreter is gone, no file descriptors are left).
Queued requests wait for a restart, but not forever: once the model has been without a
working instance for `wait_s` (`--restart-wait-secs`, default 30 s), what is queued fails
with UNAVAILABLE, and so does every new request, at once, until an instance is back.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from pbserve.errors import ErrorCode, ServerError

RESTART_WAIT_S = 30.0


class Outage:
    """The outage of one model; `error` is set while requests are refused."""

    def __init__(self, model_name: str, wait_s: float,
                 fail_queued: Callable[[ServerError], None]) -> None:
        self.model_name = model_name
        self.wait_s = wait_s
        self.error: ServerError | None = None
        self._fail_queued = fail_queued
        self._cause = ""
        self._timer: asyncio.TimerHandle | None = None

    def begin(self, cause: str) -> None:
        """No instance can run now (the last one's stub died, or a restart failed);
        `cause` says why and ends up in the requests' error."""
        self._cause = cause
        if self.error is not None:
            self.error = self._error()  # with the latest cause
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.wait_s, self._expire)

    def end(self) -> None:
        """An instance runs again."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.error = None

    def _expire(self) -> None:
        self._timer = None
        self.error = self._error()
        self._fail_queued(self.error)

    def _error(self) -> ServerError:
        return ServerError(ErrorCode.UNAVAILABLE, (
            f"model '{self.model_name}' is unavailable: no instance of it has been able to "
            f"run for {self.wait_s:g} s (restarts are tried; last failure: {self._cause})"))
