"""The frontend processes a stub answers directly (pbserve/frontends/direct.py): each
one's queue of requests (read through the inbox, stub/inbox.py, with origin slot + 1),
its answer queue and doorbell, and the output blocks each has been sent and not given
back yet.

A frontend's request keys are its own key space (`first_key`): the origin of a response
is its key's (`origin_of_key`), so a decoupled model's response sender, on any thread,
answers the frontend that sent the request. Everything here may be used from any
thread: one lock per frontend guards its answer queue (replaced when it starts again)
and what it was lent.

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

from shm.doorbell import ring
from shm.queue import MessageQueue, QueueFull
from stub import protocol as p
from stub.inbox import PARENT, Inbox

PUT_TIMEOUT_S = 1.0
KEY_SHIFT = 40  # a frontend's request keys: (origin << KEY_SHIFT) + n; the core's from 1
Frees = tuple[tuple[str, int], ...]


def origin_of(slot: int) -> int:
    """The inbox origin of frontend process `slot`'s requests."""
    return slot + 1


def first_key(slot: int) -> int:
    """The first request key of frontend process `slot` (it counts up from there)."""
    return origin_of(slot) << KEY_SHIFT


def origin_of_key(key: int) -> int:
    """Who sent request `key`: PARENT, or a frontend's origin."""
    return key >> KEY_SHIFT if key > 0 else PARENT


class _Frontend:
    """One frontend process as the stub answers it."""

    __slots__ = ("lock", "answers", "lent")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answers: MessageQueue | None = None
        self.lent: set[tuple[str, int]] = set()


class Frontends:
    """`free(frees)`: give blocks of the stub's pool back (Stub._free)."""

    def __init__(self, bell_fds: tuple[int, ...], inbox: Inbox,
                 free: Callable[[Frees], None]) -> None:
        self._bell_fds = bell_fds
        self._inbox = inbox
        self._free = free
        # one per slot, made now: the dict never changes, so any thread may read it
        self._frontends = {origin_of(slot): _Frontend() for slot in range(len(bell_fds))}

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
            ring(self._bell_fds[origin - 1])
        return True

    def returned(self, origin: int, frees: Frees) -> None:
        """The frontend of `origin` gave these back (it frees them with the stub)."""
        frontend = self._frontends.get(origin)
        if frontend is not None:
            with frontend.lock:
                frontend.lent.difference_update(frees)

    def reading(self) -> bool:
        """Whether a frontend still reads outputs it was sent."""
        return any([frontend.lent for frontend in self._frontends.values()])
