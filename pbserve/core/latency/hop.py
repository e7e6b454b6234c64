"""An instance's hop (EXECUTE sent -> the stub's answer read) and the latency tricks
that depend on it, in one place (docs/architecture.md, "Request path"):

- **announce**: an idle stub is told a request is coming, so that its wake-up overlaps
  the request's decoding (`announce`, called by Scheduler.expect_request);
- **reply watch**: after sending a request to an idle instance the parent looks for the
  answer on each turn of its event loop instead of sleeping (`watch`, called by
  ModelInstance.watch_for_reply), while no other instance of the server computes
  (`RunningInstances`);
- **queue-ahead**: a second batch may wait in a busy stub's queue (`may_queue_ahead`);
- the **hop average** all three weigh (`hop_ns`), kept from `sent` and `answered`.

`ModelInstance` owns one `Hop`: it reports each batch's start and answer, and gives it
its stub while the stub is READY (`stub`). Used on the event loop's thread only.
"""

from __future__ import annotations

import time
from typing import Protocol

from pbserve.core.latency.spare_cpu import MACHINE

# The parent watches this long at most, on each turn of its event loop, for the reply of
# a request it sent to an idle instance; longer hops are left to the doorbell.
REPLY_WATCH_NS = 300_000
# An idle stub is told at most this often that a request is coming: about as long as it
# polls for one (stub/stub.py EXPECT_NS).
EXPECT_EVERY_NS = 200_000
# A second batch waits in the stub's queue only behind batches shorter than this.
QUEUE_AHEAD_MAX_HOP_NS = 1_000_000
_HOP_WEIGHT = 8  # the hop estimate follows 1/8 of each new figure


class PolledStub(Protocol):
    """What the tricks do to a stub (instances/stub_process.py `StubProcess`)."""

    def announce(self) -> None:
        """Wake the stub: a request is on its way (it polls its main queue for it)."""

    def watch_up(self, budget_ns: int) -> None:
        """Look for the stub's answer on each turn of the event loop, for `budget_ns`."""


class RunningInstances:
    """How many instances of one server are running a batch, and how many of those wait
    for the answer to a CALL_DIRECT (a BLS `exec()`: the stub's main thread sleeps
    meanwhile). Touched only on the event loop. The parent watches for a reply only while
    one instance computes: its idle turns then take no CPU that another stub needs."""

    __slots__ = ("count", "waiting")

    def __init__(self) -> None:
        self.count = 0
        self.waiting = 0

    @property
    def computing(self) -> int:
        return self.count - self.waiting


class Hop:
    __slots__ = ("hop_ns", "stub", "_sent_ns", "_announced_ns")

    def __init__(self) -> None:
        self.hop_ns = 0  # recent EXECUTE -> answer times (moving average)
        self.stub: PolledStub | None = None  # the instance's stub while it is READY
        self._sent_ns = 0  # when the running batch started
        self._announced_ns = -(2**62)  # when the stub was last told of a request (never)

    def sent(self, now: int) -> None:
        """A batch started on the stub (sent to an idle one, or next in its queue)."""
        self._sent_ns = now

    def answered(self, now: int) -> None:
        """The running batch's answer was read: a new figure for the average."""
        self.hop_ns += (now - self._sent_ns - self.hop_ns) // _HOP_WEIGHT

    def announce(self) -> None:
        """A request is coming and this hop's idle instance will take it: wake its stub
        now, so that the stub's wake-up (tens of us from an idle CPU) overlaps the
        decoding and validation still ahead of `execute` instead of adding to the hop.
        Not more often than the stub polls for one, and only while the machine has CPU
        to spare (spare_cpu.py): the stub polls until it comes."""
        stub = self.stub
        if stub is None:
            return
        now = time.monotonic_ns()
        if now - self._announced_ns > EXPECT_EVERY_NS and MACHINE.spare():
            self._announced_ns = now
            stub.announce()

    def watch(self, computing: int) -> None:
        """A request was just sent to this idle instance: watch for the stub's answer
        (at most REPLY_WATCH_NS), so that an idle loop does not sleep in epoll and get
        woken by the doorbell, a wake-up of an idle CPU on the round trip. Only when it
        is the one instance computing (`computing`, RunningInstances.computing) and its
        recent hops fit in the watch."""
        stub = self.stub
        if computing == 1 and self.hop_ns < REPLY_WATCH_NS and stub is not None:
            stub.watch_up(REPLY_WATCH_NS)

    def may_queue_ahead(self) -> bool:
        """Whether the hops are short enough for a batch to wait behind the running one
        (a request bound to a slow instance might have gone to another that frees
        sooner)."""
        return self.hop_ns < QUEUE_AHEAD_MAX_HOP_NS
