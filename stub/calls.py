"""Calls the stub makes to the parent and waits for: BLS, metrics, model control.

A call is `(CALL, call_id, op, args)` on the up queue; the parent answers on the control
queue with `(REPLY, call_id, error, value)`, or for a stream with any number of
`(STREAM_ITEM, call_id, value, final)`. The control thread hands answers to the waiter:
a blocked thread (`call`), an asyncio future (`call_async`), or a stream sink. The main
thread's blocking calls are CALL_DIRECTs instead, answered on the main queue, which it
reads itself while it waits (direct_replies.py).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any, Callable

from backend_utils.error import TritonModelException
from stub import protocol as p
from stub.direct_replies import DirectReplies


class _Blocking:
    __slots__ = ("event", "error", "value")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.error: str | None = None
        self.value: Any = None

    def reply(self, error: str | None, value: Any) -> None:
        self.error, self.value = error, value
        self.event.set()


class _Async:
    __slots__ = ("loop", "future")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future = self.loop.create_future()

    def reply(self, error: str | None, value: Any) -> None:
        self.loop.call_soon_threadsafe(self._set, error, value)

    def _set(self, error: str | None, value: Any) -> None:
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(TritonModelException(error))
        else:
            self.future.set_result(value)


class Calls:
    def __init__(self, send: Callable[[tuple], None],
                 direct: DirectReplies | None = None) -> None:
        self._send = send
        self._direct = direct
        self._ids = itertools.count(1)
        self._waiting: dict[int, Any] = {}
        self._streams: dict[int, Callable[[Any, bool], None]] = {}
        self._lock = threading.Lock()

    def call(self, op: str, *args: Any) -> Any:
        """Ask the parent and block until it answers; TritonModelException on error."""
        direct = self._direct
        if direct is not None and direct.on_main_thread():
            call_id = next(self._ids)
            self._send(p.call_direct(call_id, op, args))
            error, value = direct.wait(call_id)
        else:
            waiter = _Blocking()
            self._start(op, args, waiter)
            waiter.event.wait()
            error, value = waiter.error, waiter.value
        if error is not None:
            raise TritonModelException(error)
        return value

    def call_async(self, op: str, *args: Any) -> asyncio.Future:
        """The same, as a future of the running event loop (nothing blocks)."""
        waiter = _Async()
        self._start(op, args, waiter)
        return waiter.future

    def stream(self, op: str, args: tuple, on_item: Callable[[Any, bool], None]) -> int:
        """Start a call answered by STREAM_ITEMs, each passed to `on_item(value, final)`."""
        call_id = next(self._ids)
        with self._lock:
            self._streams[call_id] = on_item
        self._send(p.call(call_id, op, args))
        return call_id

    def _start(self, op: str, args: tuple, waiter: Any) -> None:
        call_id = next(self._ids)
        with self._lock:
            self._waiting[call_id] = waiter
        self._send(p.call(call_id, op, args))

    # -- from the control thread ------------------------------------------------------
    def on_reply(self, call_id: int, error: str | None, value: Any) -> None:
        with self._lock:
            waiter = self._waiting.pop(call_id, None)
        if waiter is not None:
            waiter.reply(error, value)

    def on_item(self, call_id: int, value: Any, final: bool) -> None:
        with self._lock:
            on_item = self._streams.pop(call_id) if final else self._streams.get(call_id)
        if on_item is not None:
            on_item(value, final)

    def fail_all(self, error: str) -> None:
        """The stub is going away: nobody may stay blocked."""
        with self._lock:
            waiting, self._waiting = self._waiting, {}
            streams, self._streams = self._streams, {}
        for waiter in waiting.values():
            waiter.reply(error, None)
        for on_item in streams.values():
            on_item(None, True)
