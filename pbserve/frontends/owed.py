"""What a frontend process owes another process back once it has written a response:
the core's tokens for the responses it held, a stub's output blocks. They ride on the
next message that goes there anyway (`take`), else go by a message of their own
DELAY_S after the first was owed (`send`), as the core gives outputs back to a stub
(core/instances/outputs.py). On the frontend's loop only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

DELAY_S = 0.005


class Owed:
    __slots__ = ("_items", "_send", "_scheduled")

    def __init__(self, send: Callable[[tuple], None]) -> None:
        self._items: list[Any] = []
        self._send = send
        self._scheduled = False

    def add(self, items: Iterable[Any]) -> None:
        self._items.extend(items)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_later(DELAY_S, self._flush)

    def take(self) -> tuple:
        """What is owed, for a message that goes there now."""
        items, self._items = tuple(self._items), []
        return items

    def restore(self, items: tuple) -> None:
        """`take`n items whose message could not go: owed again."""
        self._items[:0] = items

    def drop(self) -> None:
        """Its peer is gone: nothing is owed any more."""
        self._items.clear()

    def _flush(self) -> None:
        self._scheduled = False
        items = self.take()
        if items:
            self._send(items)
