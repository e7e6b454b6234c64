"""When the `redis` cache's server cannot be reached: requests go on without the cache
(each a miss), one request a second tries Redis again, and the log says so a few times,
not once a request: a warning when it goes, one every 30 s while it stays away (with how
many requests went without it), a line when it is back."""

from __future__ import annotations

import logging
import time
from typing import Callable

log = logging.getLogger("pbserve")

RETRY_S = 1.0  # while Redis is away, one request in this long tries it again
WARN_EVERY_S = 30.0  # while it stays away, a warning this often


class RedisOutage:
    """Whether the cache may ask Redis now; told how each try went. On the event loop."""

    def __init__(self, where: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.where = where  # "host:port", for the log
        self._clock = clock
        self.down_since: float | None = None  # None: Redis answered last time
        self._retry_at = 0.0
        self._probing = False  # a request is trying Redis again: the others do not
        self._warned_at = 0.0
        self.bypassed = 0  # requests that went without the cache in this outage

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def may_try(self) -> bool:
        """Whether to ask Redis now: yes while it answers; while it is away, for one
        request once `RETRY_S` has passed (the probe), no for the others."""
        if self.down_since is None:
            return True
        now = self._clock()
        if not self._probing and now >= self._retry_at:
            self._probing = True
            return True
        return False

    def went_without(self) -> None:
        """A request was answered without the cache (its lookup did not ask Redis)."""
        self.bypassed += 1
        now = self._clock()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning("Response cache: Redis at %s is still unreachable: %d requests "
                        "answered without the cache in the last %.0f s", self.where,
                        self.bypassed, now - (self.down_since or now))

    def succeeded(self) -> None:
        """Redis answered."""
        self._probing = False
        if self.down_since is not None:
            log.warning("Response cache: Redis at %s is back after %.1f s (%d requests "
                        "answered without the cache)", self.where,
                        self._clock() - self.down_since, self.bypassed)
            self.down_since = None
            self.bypassed = 0

    def failed(self, error: BaseException) -> None:
        """Redis could not be reached (or did not answer in time): go without it, and
        try again in `RETRY_S`."""
        now = self._clock()
        self._probing = False
        self._retry_at = now + RETRY_S
        if self.down_since is None:
            self.down_since = self._warned_at = now
            log.warning("Response cache: Redis at %s is unreachable (%s: %s): requests are "
                        "answered without the cache, counted as misses, until it is back "
                        "(tried again every %.0f s)", self.where, type(error).__name__,
                        error, RETRY_S)

    def abandoned(self) -> None:
        """A try ended with neither answer (its request was cancelled)."""
        self._probing = False
