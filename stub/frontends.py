"""The frontend processes a stub answers directly (pbserve/frontends/direct.py): each
one's queue of requests (read through the inbox, stub/inbox.py, with origin slot + 1),
its answer queue and doorbell, and the output blocks each has been sent and not given
back yet. Used on the stub's main thread only.

An answer goes on that frontend's answer queue, then its doorbell (an eventfd the
frontend's loop watches, passed to the stub at launch) is rung when the queue was empty
(shm/doorbell.py's order). A frontend that stops reading (killed, hung) must not stop
the stub: an answer that finds its queue full for PUT_TIMEOUT_S is dropped and its
outputs freed. A frontend started again in a slot gets new queues (FRONTEND_QUEUES):
the dead one's outputs are freed then.
"""

from __future__ import annotations

from collections.abc import Callable

from shm.doorbell import ring
from shm.queue import MessageQueue, QueueFull
from stub import protocol as p
from stub.inbox import Inbox

PUT_TIMEOUT_S = 1.0
Frees = tuple[tuple[str, int], ...]


def origin_of(slot: int) -> int:
    """The inbox origin of frontend process `slot`'s requests."""
    return slot + 1


class Frontends:
    """`free(frees)`: give blocks of the stub's pool back (Stub._free)."""

    def __init__(self, bell_fds: tuple[int, ...], inbox: Inbox,
                 free: Callable[[Frees], None]) -> None:
        self._bell_fds = bell_fds
        self._inbox = inbox
        self._free = free
        self._answers: dict[int, MessageQueue] = {}
        self._lent: dict[int, set[tuple[str, int]]] = {}

    def attach(self, slot: int, requests: str, answers: str) -> None:
        """Frontend process `slot` sends on `requests` and is answered on `answers`
        (instead of the queues it had: what was sent there is given back)."""
        origin = origin_of(slot)
        self._inbox.set(origin, MessageQueue.attach(requests))
        old = self._answers.get(origin)
        self._answers[origin] = MessageQueue.attach(answers)
        if old is not None:
            old.close()
        self._free(tuple(self._lent.pop(origin, ())))
        self._lent[origin] = set()

    def knows(self, origin: int) -> bool:
        return origin in self._answers

    def answer(self, origin: int, message: tuple, outputs: Frees) -> bool:
        """Send `message` (whose outputs are `outputs`) to the frontend of `origin`;
        False, and the outputs freed, when it has not read for PUT_TIMEOUT_S."""
        try:
            first = self._answers[origin].put(p.encode(message), timeout=PUT_TIMEOUT_S)
        except QueueFull:
            self._free(outputs)
            return False
        if first:
            ring(self._bell_fds[origin - 1])
        self._lent[origin].update(outputs)
        return True

    def returned(self, origin: int, frees: Frees) -> None:
        """The frontend of `origin` gave these back (it frees them with the stub)."""
        self._lent[origin].difference_update(frees)

    def reading(self) -> bool:
        """Whether a frontend still reads outputs it was sent."""
        return any(self._lent.values())
