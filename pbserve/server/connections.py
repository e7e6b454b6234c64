"""The open connections of one listening server (HTTP, http/protocol.py; gRPC on zttp,
grpc/h2/connection.py): the cap on their number, and the sweeper that closes those that
waited too long (a head or a body that stopped arriving, an idle keep-alive connection).

Nothing here runs per request. A connection notes the time of its last read from
`ConnectionSet.now`, a clock the sweeper advances on each round (a few times per the
shortest timeout), so timeouts are exact to within one round.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Iterator
from typing import Protocol

from pbserve.server.error_log import ErrorLog

log = logging.getLogger("pbserve.http")

# File descriptors left to everything but HTTP connections (stubs, gRPC, shm, logs)
# when the connection cap is derived from the process's limit: a quarter, at least 64.
_FD_RESERVE_MIN = 64
_MIN_CONNECTIONS = 16
_SWEEP_MIN_S = 0.05
_SWEEP_MAX_S = 1.0


class Connection(Protocol):
    """What the set needs of a connection (HttpConnection, GrpcConnection)."""

    @property
    def idle_since(self) -> float | None:
        """When it last went idle (between requests, nothing unanswered); None if busy."""

    def expire(self, now: float) -> None:
        """Close it if it waited longer than its timeouts allow at `now`."""

    def close_idle(self) -> None:
        """Close it now, as a keep-alive connection the server no longer wants."""


def default_max_connections() -> int:
    """A cap below the process's file descriptor limit (RLIMIT_NOFILE, soft)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(_MIN_CONNECTIONS, soft - max(_FD_RESERVE_MIN, soft // 4))


class Limits(Protocol):
    """What the set needs of its server's limits (HttpLimits, the gRPC side's GrpcLimits)."""

    max_connections: int | None

    def timeouts(self) -> list[float]:
        """The timeouts that are on, in seconds."""


def sweep_interval(limits: Limits) -> float:
    timeouts = limits.timeouts()
    if not timeouts:
        return _SWEEP_MAX_S
    return min(_SWEEP_MAX_S, max(_SWEEP_MIN_S, min(timeouts) / 4))


class ConnectionSet:
    """Connections of one listening server, at most `max_connections` at once: a new one
    past the cap takes the place of the connection idle the longest, and is refused if
    none is idle."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.max_connections = limits.max_connections or default_max_connections()
        self.now = time.monotonic()
        self._connections: set[Connection] = set()
        self._sweeper: asyncio.Task | None = None
        self.errors = ErrorLog(log)  # refusals, failed replies: one line per kind at most

    def __len__(self) -> int:
        return len(self._connections)

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._connections))

    def admit(self, connection: Connection) -> bool:
        """Take `connection` in, closing an idle one if the cap is reached; False when
        every connection is busy (the caller refuses it)."""
        if len(self._connections) >= self.max_connections and not self._evict_idle():
            return False
        self._connections.add(connection)
        return True

    def discard(self, connection: Connection) -> None:
        self._connections.discard(connection)

    def _evict_idle(self) -> bool:
        oldest, oldest_since = None, None
        for connection in self._connections:
            since = connection.idle_since
            if since is not None and (oldest_since is None or since < oldest_since):
                oldest, oldest_since = connection, since
        if oldest is None:
            return False
        self._connections.discard(oldest)
        oldest.close_idle()
        return True

    # --- the sweeper ---------------------------------------------------------------

    def start(self) -> None:
        """Start sweeping on the running loop (stopped by `stop`)."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def _sweep(self) -> None:
        interval = sweep_interval(self.limits)
        while True:
            await asyncio.sleep(interval)
            self.now = now = time.monotonic()
            for connection in list(self._connections):
                try:
                    connection.expire(now)
                except Exception as exc:  # noqa: BLE001 - one must not stop the sweeps
                    self.errors.line(logging.ERROR, "expire", "HTTP: closing an expired "
                                     "connection failed", exc_info=exc)
