"""The frontend processes a stub answers directly (pbserve/frontends/direct.py), and the
other stubs that send it BLS calls directly (stub/direct_bls.py): each one's queue of
requests (read through the inbox, stub/inbox.py, with its origin: a frontend's is its
slot + 1, a stub's the core gives it), its answer queue and the way to wake it (a
frontend's doorbell, a stub's bell semaphore), and the output blocks each has been sent
and not given back yet.

A frontend's (or calling stub's) request keys are its own key space (`first_key`): the
origin of a response is its key's (`origin_of_key`), so a decoupled model's response
sender, on any thread, answers the frontend that sent the request. Everything here may
be used from any thread: one lock per origin guards its answer queue (replaced when a
frontend starts again) and what it was lent.

An answer goes on that frontend's answer queue, then its doorbell (an eventfd the
frontend's loop watches, passed to the stub at launch) is rung when the queue was empty
(shm/doorbell.py's order). A frontend that stops reading (killed, hung) must not stop
the stub: an answer that finds its queue full for PUT_TIMEOUT_S is dropped and its
outputs freed. A frontend started again in a slot gets new queues (FRONTEND_QUEUES):
the dead one's outputs are freed then.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import posix_ipc

from shm.doorbell import ring
from shm.queue import MessageQueue, QueueFull
from stub import protocol as p
from stub.inbox import PARENT, Inbox

PUT_TIMEOUT_S = 1.0
KEY_SHIFT = 40  # a frontend's request keys: (origin << KEY_SHIFT) + n; the core's from 1
LAST_PARENT_KEY = (1 << KEY_SHIFT) - 1
FIRST_STUB_ORIGIN = 1 << 12  # a calling stub's origin (the core gives it); a frontend's
#   is below (its slot + 1: --frontend-processes is far below this)
Frees = tuple[tuple[str, int], ...]


def origin_of(slot: int) -> int:
    """The inbox origin of frontend process `slot`'s requests."""
    return slot + 1


def first_key(origin: int) -> int:
    """The first request key of the frontend process (or calling stub) of `origin` (it
    counts up from there)."""
    return origin << KEY_SHIFT


def origin_of_key(key: int) -> int:
    """Who sent request `key`: PARENT, or a frontend's origin."""
    return key >> KEY_SHIFT if key > 0 else PARENT


class _Frontend:
    """One frontend process (or calling stub) as the stub answers it; `wake` after a put
    that found its answer queue empty."""

    __slots__ = ("lock", "answers", "lent", "wake", "bell")

    def __init__(self, wake: Callable[[], None] = lambda: None) -> None:
        self.lock = threading.Lock()
        self.answers: MessageQueue | None = None
        self.lent: set[tuple[str, int]] = set()
        self.wake = wake
        self.bell: posix_ipc.Semaphore | None = None  # a calling stub's


class Frontends:
    """`free(frees)`: give blocks of the stub's pool back (Stub._free)."""

    def __init__(self, bell_fds: tuple[int, ...], inbox: Inbox,
                 free: Callable[[Frees], None]) -> None:
        self._inbox = inbox
        self._free = free
        # one per slot, made now, and one per calling stub, added and removed on the main
        # thread (a single dict operation: any thread may look one up)
        self._frontends = {origin_of(slot): _Frontend(_ringer(fd))
                           for slot, fd in enumerate(bell_fds)}

    def attach(self, slot: int, requests: str, answers: str) -> None:
        """Frontend process `slot` sends on `requests` and is answered on `answers`
        (instead of the queues it had: what was sent there is given back). On the main
        thread (the inbox is its own)."""
        origin = origin_of(slot)
        self._inbox.set(origin, MessageQueue.attach(requests))
        frontend = self._frontends[origin]
        with frontend.lock:
            old, frontend.answers = frontend.answers, MessageQueue.attach(answers)
            lent, frontend.lent = frontend.lent, set()
        if old is not None:
            old.close()
        self._free(tuple(lent))

    def attach_caller(self, origin: int, requests: str, answers: str, bell: str) -> None:
        """The stub of `origin` sends BLS calls on `requests`, is answered on `answers`
        and woken by posting its semaphore `bell` (on the main thread)."""
        self.forget(origin)
        caller = _Frontend()
        caller.bell = posix_ipc.Semaphore(bell)
        caller.wake = caller.bell.release
        caller.answers = MessageQueue.attach(answers)
        self._inbox.set(origin, MessageQueue.attach(requests))
        self._frontends[origin] = caller

    def forget(self, origin: int) -> None:
        """The calling stub of `origin` ended: its queues are closed and what it was lent
        is freed (on the main thread)."""
        caller = self._frontends.get(origin)
        if caller is None or caller.bell is None:
            return  # not a calling stub's (a frontend's slot stays)
        del self._frontends[origin]
        self._inbox.remove(origin)
        with caller.lock:
            queue, caller.answers = caller.answers, None
            lent, caller.lent = caller.lent, set()
        if queue is not None:
            queue.close()
        caller.bell.close()
        self._free(tuple(lent))

    @staticmethod
    def name(origin: int) -> str:
        """Who `origin` is, in a log line."""
        return f"frontend process {origin - 1}" if origin < FIRST_STUB_ORIGIN \
            else f"the calling stub of origin {origin}"

    def knows(self, origin: int) -> bool:
        frontend = self._frontends.get(origin)
        return frontend is not None and frontend.answers is not None

    def answer(self, origin: int, message: tuple, outputs: Frees) -> bool:
        """Send `message` (whose outputs are `outputs`) to the frontend of `origin`;
        False, and the outputs freed, when it has not read for PUT_TIMEOUT_S (or is
        not known)."""
        frontend = self._frontends.get(origin)
        if frontend is None:
            self._free(outputs)
            return False
        encoded = p.encode(message)
        with frontend.lock:
            queue = frontend.answers
            try:
                first = queue is not None and queue.put(encoded, timeout=PUT_TIMEOUT_S)
            except QueueFull:
                queue = None
            if queue is not None:
                frontend.lent.update(outputs)
        if queue is None:
            self._free(outputs)
            return False
        if first:
            frontend.wake()
        return True

    def returned(self, origin: int, frees: Frees) -> None:
        """The frontend of `origin` gave these back (it frees them with the stub)."""
        frontend = self._frontends.get(origin)
        if frontend is not None:
            with frontend.lock:
                frontend.lent.difference_update(frees)

    def reading(self) -> bool:
        """Whether a frontend process still reads outputs it was sent (a stub at unload
        waits for that: a frontend maps a region by its name when it reads, and the name
        goes with the stub). A calling stub is not waited for: it mapped the regions of
        its answers when it took them, and its mappings outlive the names."""
        return any([frontend.lent for frontend in self._frontends.values()
                    if frontend.bell is None])


def _ringer(fd: int) -> Callable[[], None]:
    return lambda: ring(fd)
