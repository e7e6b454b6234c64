"""A wake-up from a stub that the parent's event loop can wait on.

Posix semaphores cannot be polled by an event loop, so a message on a stub's up queue
used to need a reader thread that blocked on the semaphore and then woke the loop: two
thread wake-ups and a GIL hand-over per reply. The stub instead rings an eventfd after
each `put`; the loop watches the fd (`add_reader`) and drains the queue itself. The
eventfd carries no data, only "look at the queue": messages and tensors stay in shm.

The order makes a lost wake-up impossible: the stub puts, then rings; the parent
clears the bell, then drains. A ring for a message already drained only costs an empty
pass.
"""

from __future__ import annotations

import os

_ONE = (1).to_bytes(8, "little")


class Doorbell:
    """The parent's end: an eventfd, non-blocking, inherited by one stub."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def clear(self) -> None:
        """Reset the count (before draining the queue)."""
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def ring(fd: int) -> None:
    """The stub's end: wake the parent (any thread; an eventfd write is atomic)."""
    try:
        os.write(fd, _ONE)
    except OSError:  # the parent closed its end: it is going away, the queue is unread
        pass
