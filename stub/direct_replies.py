"""Blocking calls from the stub's main thread, answered on the main queue (CALL_DIRECT).

The main thread runs `execute`. A call it makes (a BLS `exec()`, a custom metric, model
control) used to wait on an Event that the control thread set once the parent's REPLY
came on the control queue: two wake-ups (the control thread's, then the main
thread's) and the GIL handed between them, at every call. Here the main thread reads the
main queue itself until its REPLY is there: the parent's post wakes it directly.

Only the main thread makes such calls, one at a time, so the only REPLY on the main
queue is the awaited one. Whatever else comes there meanwhile (the next EXECUTE, an
announcement, LOG_SETTINGS, FINALIZE) is held, in order, for the main loop (`next`).
"""

from __future__ import annotations

import collections
import threading
from typing import Any

from shm.queue import MessageQueue
from stub import protocol as p


class DirectReplies:
    """The main queue as the main thread reads it: its messages, and its calls' answers."""

    def __init__(self, main_q: MessageQueue) -> None:
        self._queue = main_q
        self._thread = threading.get_ident()  # made on the thread that runs the main loop
        self._held: collections.deque[bytes] = collections.deque()

    def on_main_thread(self) -> bool:
        return threading.get_ident() == self._thread

    def wait(self, call_id: int) -> tuple[str | None, Any]:
        """The (error, value) of the REPLY to CALL_DIRECT `call_id`; on the main thread."""
        while True:
            raw = self._queue.get()
            if raw:
                message = p.decode(raw)
                if message[0] == p.REPLY and message[1] == call_id:
                    return message[2], message[3]
            self._held.append(raw)

    def next(self, timeout: float | None) -> bytes | None:
        """The main loop's next message: a held one first, else from the queue (None: none
        came within `timeout`)."""
        return self._held.popleft() if self._held else self._queue.get(timeout)

    def pending(self) -> bool:
        """Whether a message waits for the main loop (no system call)."""
        return bool(self._held) or self._queue.pending()
