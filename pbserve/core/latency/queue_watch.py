"""A queue polled once a turn of the event loop for a bounded time, instead of the loop
sleeping in epoll until the queue's doorbell wakes it: the parent watching a stub's
reply (instances/stub_process.py), a frontend process watching the core's answer
(pbserve/frontends/channel.py). On the loop's thread only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from pbserve.core.latency.spare_cpu import idle_turn


class QueueWatch:
    """`pending()`: whether a message waits; `drain()`: read what waits; `alive()`:
    whether the queue may still be read (a closed one is not)."""

    __slots__ = ("_loop", "_pending", "_drain", "_alive", "_deadline")

    def __init__(self, loop: asyncio.AbstractEventLoop, pending: Callable[[], bool],
                 drain: Callable[[], None], alive: Callable[[], bool]) -> None:
        self._loop = loop
        self._pending = pending
        self._drain = drain
        self._alive = alive
        self._deadline = 0  # perf_counter_ns the watch ends (0: none)

    def extend(self, budget_ns: int) -> None:
        """Poll once per turn of the loop, for at most `budget_ns`, and drain as soon as
        a message came. The loop goes on with its other work between turns; when it has
        none it turns at once, yielding the CPU on each such turn, so that other
        runnable work on a busy machine goes first. A watch already on is extended,
        not doubled."""
        now = time.perf_counter_ns()
        watching = self._deadline != 0
        self._deadline = max(self._deadline, now + budget_ns)
        if not watching:
            self._loop.call_soon(self._turn, now)

    def _turn(self, last: int) -> None:
        if not self._alive():  # its queue may be gone
            self._deadline = 0
            return
        if self._pending():
            self._deadline = 0
            self._drain()
            return
        now = time.perf_counter_ns()
        if now < self._deadline:
            idle_turn(last, now)
            self._loop.call_soon(self._turn, now)
        else:
            self._deadline = 0
