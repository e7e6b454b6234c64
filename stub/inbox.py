"""What the stub's main thread reads: the parent's main queue and, with frontend processes,
one queue from each frontend (requests it sends this stub directly), as one inbox.

One producer a queue: a producer killed in the middle of a `put` harms only its own
queue. Each producer puts, then posts the stub's bell (a posix semaphore) when its queue
was empty (`MessageQueue.put` says so); the main thread reads every queue until all are
empty, and only then waits on the bell. The order makes a lost wake-up impossible, as in
shm/doorbell.py: a message put after the main thread looked at its queue found that
queue empty, so its producer posts; one put before is read in that look. A post for a
message already read costs one pass that reads nothing.
"""

from __future__ import annotations

import time

import posix_ipc

from shm.queue import MessageQueue

PARENT = 0  # the origin of the parent's messages; a frontend's is its slot + 1


def bell_name(prefix: str) -> str:
    """The name of the bell of the stub with this shm prefix."""
    return prefix + "-b"


def post(bell: posix_ipc.Semaphore) -> None:
    """The producer's end, after a `put` that found its queue empty."""
    bell.release()


class Inbox:
    """`get` the next message of any queue, with its origin; PARENT's first. Without a
    bell (a server without frontend processes) the main queue is the only one, and its
    own semaphore wakes the stub, as it always did."""

    def __init__(self, main: MessageQueue, bell: posix_ipc.Semaphore | None) -> None:
        self._main = main
        self._queues: list[tuple[int, MessageQueue]] = [(PARENT, main)]
        self._bell = bell

    def set(self, origin: int, queue: MessageQueue) -> None:
        """Read `queue` for `origin` (instead of the one it had: closed); only with a
        bell."""
        assert self._bell is not None
        for i, (known, old) in enumerate(self._queues):
            if known == origin:
                self._queues[i] = (origin, queue)
                old.close()
                return
        self._queues.append((origin, queue))

    def remove(self, origin: int) -> None:
        """Stop reading `origin`'s queue (closed); nothing if it has none."""
        for i, (known, queue) in enumerate(self._queues):
            if known == origin and origin != PARENT:
                del self._queues[i]
                queue.close()
                return

    def get(self, timeout: float | None = None) -> tuple[int, bytes] | None:
        """(origin, message) of the next message, or None when none came within
        `timeout` s (0: do not wait; None: wait until one comes)."""
        if self._bell is None:
            raw = self._main.get(timeout)
            return None if raw is None else (PARENT, raw)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for origin, queue in self._queues:
                raw = queue.get(0)
                if raw is not None:
                    return origin, raw
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            try:
                self._bell.acquire(left)
            except posix_ipc.BusyError:
                return None
            except posix_ipc.SignalError:  # a signal handler ran: early, as a timeout
                if deadline is not None:
                    return None

    def from_frontends(self) -> tuple[int, bytes] | None:
        """The next message of a frontend's queue, if one waits (not the parent's)."""
        for origin, queue in self._queues[1:]:
            raw = queue.get(0)
            if raw is not None:
                return origin, raw
        return None

    def pending(self) -> bool:
        """Whether a message waits in any queue (no system call)."""
        if self._bell is None:
            return self._main.pending()
        return any([queue.pending() for _, queue in self._queues])
