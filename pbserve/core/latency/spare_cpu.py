"""Whether the machine has CPU to spare, from /proc/stat, sampled at most every SAMPLE_NS.

The parent and the stubs poll instead of sleeping at a few places (an announced request,
Hop.announce; the watch for a reply; the loop's linger after a request):
that hides wake-ups when CPUs sit idle between requests, and only takes CPU from the
others when they are all busy (the 64 B gRPC rows at c=8 lost 4 % to the announcement).
So they poll only while this says yes. The time the parent itself spent polling
(`credit`) counts as idle: it would have slept, and it yields to whoever needs the CPU.
"""

from __future__ import annotations

import os
import time
from dataclasses import astuple

from pbserve.core.observability.cpu_metrics import read_cpu_times

SAMPLE_NS = 100_000_000  # the idle fraction is taken over at least this long
SPARE_MIN = 0.25  # of all CPUs' time idle: enough to spare
IDLE_TURN_NS = 10_000  # a turn this short ran nothing else: yield the CPU
_NS_PER_TICK = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


class SpareCpu:
    """`spare()`: whether the CPUs were idle for SPARE_MIN of the last sample or more.
    Where /proc/stat cannot be read, never."""

    def __init__(self, path: str = "/proc/stat") -> None:
        self._path = path
        self._sampled_ns = time.monotonic_ns()
        self._last = self._read()
        self._spare = False
        self._polled_ns = 0

    def credit(self, ns: int) -> None:
        """This process polled (yielding the CPU) for `ns`: count it as idle."""
        self._polled_ns += ns

    def spare(self) -> bool:
        now = time.monotonic_ns()
        if now - self._sampled_ns >= SAMPLE_NS:
            self._sampled_ns = now
            current = self._read()
            if current is not None and self._last is not None:
                total = current[1] - self._last[1]
                idle = current[0] - self._last[0] + self._polled_ns / _NS_PER_TICK
                self._spare = total > 0 and idle / total >= SPARE_MIN
            self._last = current
            self._polled_ns = 0
        return self._spare

    def _read(self) -> tuple[int, int] | None:
        """(idle, total) ticks of all CPUs."""
        try:
            times = read_cpu_times(self._path)
        except (OSError, ValueError):
            return None
        return times.idle + times.iowait, sum(astuple(times))


MACHINE = SpareCpu()


def idle_turn(last: int, now: int, spare: SpareCpu = MACHINE) -> None:
    """A step of a chain of turns that polls on the event loop (the linger, the watch
    for a stub's reply, StubProcess.watch_up): when nothing else ran since the last step
    (under IDLE_TURN_NS ago), count the time as polled and yield the CPU."""
    if now - last < IDLE_TURN_NS:
        spare.credit(now - last)
        os.sched_yield()
