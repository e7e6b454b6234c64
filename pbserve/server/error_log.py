"""What the frontends log about requests that fail, and how often.

A client decides how many failing requests it sends, so the log must not grow with them:
each kind of failure is logged at most `burst` times, then once per `interval_s`, the
line let through saying how many of its kind were left out. Kinds are fixed by the code
(a status, an exception type), never taken from what a client sent.

What is logged: an unexpected exception with its traceback (it is a bug); shared memory
that ran out, and a request that cannot be decoded at all, as one line; errors a request
is expected to end with (an unknown model, a wrong shape) not at all, as before.
`error_of` is the error any exception ends a request with, in both frontends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pbserve.errors import ErrorCode, MalformedRequest, ServerError, internal
from shm.region import ShmExhausted

BURST = 5
INTERVAL_S = 10.0


def error_of(exc: BaseException) -> ServerError:
    """Any exception of a request -> a ServerError: shared memory that cannot be had is
    RESOURCE_EXHAUSTED (its message names the size), other unexpected ones INTERNAL."""
    if isinstance(exc, ServerError):
        return exc
    if isinstance(exc, ShmExhausted):
        return ServerError(ErrorCode.RESOURCE_EXHAUSTED, str(exc))
    return internal(f"{type(exc).__name__}: {exc}")


class _Bucket:
    __slots__ = ("left_out", "tokens", "updated")

    def __init__(self, tokens: float, now: float) -> None:
        self.tokens = tokens
        self.updated = now
        self.left_out = 0


class ErrorLog:
    """A rate-limited view of `logger` (a token bucket per kind)."""

    def __init__(self, logger: logging.Logger, burst: int = BURST,
                 interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._burst = burst
        self._interval = interval_s
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def line(self, level: int, kind: str, message: str,
             exc_info: BaseException | None = None) -> bool:
        """Log `message` unless its kind used up its share; whether it was logged."""
        now = self._clock()
        bucket = self._buckets.get(kind)
        if bucket is None:
            bucket = self._buckets[kind] = _Bucket(self._burst, now)
        else:
            bucket.tokens = min(self._burst,
                                bucket.tokens + (now - bucket.updated) / self._interval)
            bucket.updated = now
        if bucket.tokens < 1:
            bucket.left_out += 1
            return False
        bucket.tokens -= 1
        if bucket.left_out:
            message += f" ({bucket.left_out} more like it not logged)"
            bucket.left_out = 0
        self._logger.log(level, "%s", message, exc_info=exc_info)
        return True

    def request_failed(self, what: str, exc: BaseException) -> ServerError:
        """The error a request ends with (`what`: the route or RPC), logged as its kind
        asks (see the module docstring)."""
        error = error_of(exc)
        if isinstance(exc, MalformedRequest):
            self.line(logging.WARNING, "malformed", f"{what}: {error.message}")
        elif isinstance(exc, ServerError):
            pass
        elif isinstance(exc, ShmExhausted):
            self.line(logging.ERROR, "shm", f"{what}: {error.message}")
        else:
            self.line(logging.ERROR, type(exc).__name__, f"{what} failed", exc_info=exc)
        return error
