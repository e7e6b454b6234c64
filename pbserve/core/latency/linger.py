"""The parent's event loop turns on for a while after a request completes.

At low load the loop otherwise sleeps in epoll between requests, and the next request's
arrival (a socket for HTTP, grpcio's poller thread for gRPC) must wake it: a wake-up of an
idle CPU, tens of us on a VM. Turning on for LINGER_NS (yielding the CPU on turns that ran
nothing, and only while the machine has CPU to spare) lets a request that comes soon be
read at once. A busy loop is not affected: its turns have work anyway.
"""

from __future__ import annotations

import asyncio
import time

from pbserve.core.latency.spare_cpu import MACHINE, SpareCpu, idle_turn

LINGER_NS = 500_000


class Linger:
    """`after_request()` on the loop: keep it turning for LINGER_NS from now."""

    def __init__(self, spare: SpareCpu = MACHINE) -> None:
        self._spare = spare
        self._deadline = 0
        self._turning = False

    def after_request(self) -> None:
        if not self._spare.spare():
            return
        now = time.perf_counter_ns()
        self._deadline = now + LINGER_NS
        if not self._turning:
            self._turning = True
            asyncio.get_running_loop().call_soon(self._turn, now)

    def _turn(self, last: int) -> None:
        now = time.perf_counter_ns()
        if now >= self._deadline:
            self._turning = False
            return
        idle_turn(last, now, self._spare)
        asyncio.get_running_loop().call_soon(self._turn, now)
