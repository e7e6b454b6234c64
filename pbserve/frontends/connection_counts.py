"""How many client connections each frontend process holds, in a memfd the core makes
and every frontend maps: the gate of each frontend's accept loop
(pbserve/server/gated_accept.py), so that connections are spread evenly over the
frontends, two of them too.

One int64 a slot. A slot's frontend is its only writer while it runs (its event loop's
thread; an aligned 8-byte store, which readers see whole); the core writes UNAVAILABLE
into it when the frontend process has ended, before another starts in the slot. A slot
reads UNAVAILABLE until its frontend serves (`SlotGate.serving`), so a frontend that is
starting, or gone, never holds the others back.
"""

from __future__ import annotations

import mmap
import os

UNAVAILABLE = 1 << 62  # a slot whose frontend does not serve
_BYTES = 8


class ConnectionCounts:
    """The counts of `count` slots; `fd` goes to each frontend (pass_fds)."""

    def __init__(self, fd: int, count: int) -> None:
        self.fd = fd
        self._map = mmap.mmap(fd, count * _BYTES)
        self._counts = memoryview(self._map).cast("q")

    @classmethod
    def create(cls, count: int) -> ConnectionCounts:
        fd = os.memfd_create("pbserve-frontend-connections", os.MFD_CLOEXEC)
        os.ftruncate(fd, count * _BYTES)
        counts = cls(fd, count)
        for slot in range(count):
            counts.set_unavailable(slot)
        return counts

    @classmethod
    def attach(cls, fd: int) -> ConnectionCounts:
        """The counts a frontend inherited (their size is the memfd's)."""
        return cls(fd, os.fstat(fd).st_size // _BYTES)

    def __len__(self) -> int:
        return len(self._counts)

    def __getitem__(self, slot: int) -> int:
        return self._counts[slot]

    def publish(self, slot: int, value: int) -> None:
        """The slot's writer's: its frontend (its count), or the core (UNAVAILABLE)."""
        self._counts[slot] = value

    def set_unavailable(self, slot: int) -> None:
        """The core's: the slot's frontend has ended."""
        self.publish(slot, UNAVAILABLE)

    def gate(self, slot: int) -> SlotGate:
        return SlotGate(self, slot)

    def close(self) -> None:
        self._counts.release()
        self._map.close()
        os.close(self.fd)


def may_accept(mine: int, others: list[int]) -> bool:
    """Triton has no such rule (its one process takes every connection): a frontend takes
    the next connection while it holds no more than any other serving frontend."""
    return all(mine <= other for other in others)


class SlotGate:
    """One frontend's gate (server/gated_accept.py's AcceptGate), over its slot: its
    connections, published while it serves."""

    def __init__(self, counts: ConnectionCounts, slot: int) -> None:
        self._counts = counts
        self._slot = slot
        self._others = [s for s in range(len(counts)) if s != slot]
        self._connections = 0
        self._serving = False

    def serving(self) -> None:
        """This frontend accepts from now on: the others count it."""
        self._serving = True
        self._publish()

    def stopped(self) -> None:
        """This frontend accepts no more (it drains): the others no longer count it."""
        self._serving = False
        self._publish()

    def may_accept(self) -> bool:
        return self._serving and may_accept(self._connections,
                                            [self._counts[s] for s in self._others])

    def opened(self) -> None:
        self._connections += 1
        self._publish()

    def closed(self) -> None:
        self._connections -= 1
        self._publish()

    def _publish(self) -> None:
        self._counts.publish(self._slot, self._connections if self._serving else UNAVAILABLE)
