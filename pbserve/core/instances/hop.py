"""An instance's hop (EXECUTE sent -> the stub's answer read) and the latency tricks
that depend on it, in one place (docs/architecture.md, "Request path"):

- **announce**: an idle stub is told a request is coming, so that its wake-up overlaps
  the request's decoding (`may_announce`);
- **reply watch**: after sending a request to an idle instance the parent looks for the
  answer on each turn of its event loop instead of sleeping (`may_watch`);
- **queue-ahead**: a second batch may wait in a busy stub's queue (`may_queue_ahead`);
- the **hop average** all three weigh (`hop_ns`), kept from `sent` and `answered`.

`ModelInstance` owns one `Hop` and consults it from `execute`, `expect_request` and
`watch_for_reply`. Used on the event loop's thread only.
"""

from __future__ import annotations

from pbserve.core.polling.spare_cpu import MACHINE

# The parent watches this long at most, on each turn of its event loop, for the reply of
# a request it sent to an idle instance; longer hops are left to the doorbell.
REPLY_WATCH_NS = 300_000
# An idle stub is told at most this often that a request is coming: about as long as it
# polls for one (stub/stub.py EXPECT_NS).
EXPECT_EVERY_NS = 200_000
# A second batch waits in the stub's queue only behind batches shorter than this.
QUEUE_AHEAD_MAX_HOP_NS = 1_000_000
_HOP_WEIGHT = 8  # the hop estimate follows 1/8 of each new figure


class Hop:
    __slots__ = ("hop_ns", "_sent_ns", "_announced_ns")

    def __init__(self) -> None:
        self.hop_ns = 0  # recent EXECUTE -> answer times (moving average)
        self._sent_ns = 0  # when the running batch started
        self._announced_ns = -(2**62)  # when the stub was last told of a request (never)

    def sent(self, now: int) -> None:
        """A batch started on the stub (sent to an idle one, or next in its queue)."""
        self._sent_ns = now

    def answered(self, now: int) -> None:
        """The running batch's answer was read: a new figure for the average."""
        self.hop_ns += (now - self._sent_ns - self.hop_ns) // _HOP_WEIGHT

    def may_announce(self, now: int) -> bool:
        """Whether to tell an idle stub of a coming request now: not more often than it
        polls for one, and only while the machine has CPU to spare (polling/spare_cpu)."""
        if now - self._announced_ns > EXPECT_EVERY_NS and MACHINE.spare():
            self._announced_ns = now
            return True
        return False

    def may_watch(self, running: int) -> bool:
        """Whether to watch for the answer of a request just sent: only when it is the
        one instance running (`running`) and its recent hops fit in the watch."""
        return running == 1 and self.hop_ns < REPLY_WATCH_NS

    def may_queue_ahead(self) -> bool:
        """Whether the hops are short enough for a batch to wait behind the running one
        (a request bound to a slow instance might have gone to another that frees
        sooner)."""
        return self.hop_ns < QUEUE_AHEAD_MAX_HOP_NS
