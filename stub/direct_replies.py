"""Blocking calls from the stub's main thread, answered on the main queue (CALL_DIRECT).

The main thread runs `execute`. A call it makes (a BLS `exec()`, a custom metric, model
control) used to wait on an Event that the control thread set once the parent's REPLY
came on the control queue: two wake-ups (the control thread's, then the main
thread's) and the GIL handed between them, at every call. Here the main thread reads the
main queue itself until its REPLY is there: the parent's post wakes it directly.

While `poll_ns` is set (the stub does so for a request the parent announced: it does
only while the machine has CPU to spare), the main thread polls for the answer that long,
yielding the CPU on each look, before it sleeps: a BLS call to a short model is answered
in about a hop, and a sleeping thread's wake-up on an idle CPU costs tens of us more.

Only the main thread makes such calls, one at a time, so the only REPLY on the main
queue is the awaited one. Whatever else comes there meanwhile (the next EXECUTE, an
announcement, LOG_SETTINGS, FINALIZE) is held, in order, for the main loop (`next`).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any, Callable

from stub import protocol as p
from stub.inbox import PARENT, Inbox

ALIVE_CHECK_S = 0.2  # how often a direct BLS call's wait looks whether its callee lives


def poll(pending: Callable[[], bool], budget_ns: int) -> bool:
    """Look at `pending()` for at most `budget_ns`, yielding the CPU between looks (the
    process that will put the message may need it); whether it became true."""
    deadline = time.perf_counter_ns() + budget_ns
    now, yield_cpu = time.perf_counter_ns, os.sched_yield
    while not pending() and now() < deadline:
        yield_cpu()
    return pending()


class DirectReplies:
    """The inbox as the main thread reads it: its messages, and its calls' answers."""

    def __init__(self, inbox: Inbox) -> None:
        self._queue = inbox
        self._thread = threading.get_ident()  # made on the thread that runs the main loop
        self._held: collections.deque[tuple[int, bytes]] = collections.deque()
        self.poll_ns = 0  # how long `wait` polls before it sleeps (0: it sleeps at once)

    def on_main_thread(self) -> bool:
        return threading.get_ident() == self._thread

    def wait(self, call_id: int) -> tuple[str | None, Any]:
        """The (error, value) of the REPLY to CALL_DIRECT `call_id`; on the main thread."""
        if self.poll_ns:
            poll(self._queue.pending, self.poll_ns)
        while True:
            got = self._queue.get()
            assert got is not None
            origin, raw = got
            if raw and origin == PARENT:
                message = p.decode(raw)
                if message[0] == p.REPLY and message[p.REPLY_CALL_ID] == call_id:
                    return message[p.REPLY_ERROR], message[p.REPLY_VALUE]
            self._held.append(got)

    def wait_from(self, origin: int, answers: Callable[[bytes], tuple | None],
                  alive: Callable[[], bool]) -> tuple | None:
        """What `answers` makes of the first message from inbox `origin` it takes (the
        answer of a direct BLS call, stub/direct_bls.py; it passes over others: answers
        nobody waits for any more); on the main thread. None once `alive()` says the
        callee died (asked every ALIVE_CHECK_S while the answer has not come)."""
        if self.poll_ns:
            poll(self._queue.pending, self.poll_ns)
        checked = time.monotonic()
        while True:
            got = self._queue.get(ALIVE_CHECK_S)
            if got is not None:
                if got[0] != origin:
                    self._held.append(got)
                elif (answer := answers(got[1])) is not None:
                    return answer
            if time.monotonic() - checked >= ALIVE_CHECK_S:
                if not alive():
                    return None
                checked = time.monotonic()

    def next(self, timeout: float | None) -> tuple[int, bytes] | None:
        """The main loop's next (origin, message): a held one first, else from the inbox
        (None: none came within `timeout`)."""
        return self._held.popleft() if self._held else self._queue.get(timeout)

    def pending(self) -> bool:
        """Whether a message waits for the main loop (no system call)."""
        return bool(self._held) or self._queue.pending()
