"""Blocks of other processes' pools that this stub views and may hand on as outputs.

A model that returns a BLS output as its own output (a pipeline stage handing a tensor
on) should not copy it: `lend` finds the block behind such an array, and the response
names that block instead of a copy. Such a block stays alive (this stub keeps the array,
so the BLS token is not released) until the parent gives it back with RELEASE.

Large inputs of a request the parent marked lendable (its own copy, for a model with one
response per request) are registered too, with `keep=False`: an identity-like model then
answers without a copy, and the parent, which owns that block, frees it with the
response instead of with the request.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np


class BorrowedBlocks:
    def __init__(self) -> None:
        self._live: dict[int, tuple[weakref.ref, tuple[str, int, int], bool]] = {}
        self._lent: dict[tuple[str, int], list] = {}
        self._lock = threading.Lock()

    def register(self, base: np.ndarray, region: str, offset: int, nbytes: int,
                 keep: bool = True) -> int | None:
        """`base` is a view of the whole block (region, offset, nbytes); `keep`: this
        stub must keep it alive while it is lent (False: its owner, the parent, does, and
        the caller must `unregister` it when that may end). The key to unregister it."""
        if nbytes == 0:
            return None
        pointer = base.ctypes.data
        with self._lock:
            self._live[pointer] = (weakref.ref(base), (region, offset, nbytes), keep)
        weakref.finalize(base, self._forget, pointer)
        return pointer

    def unregister(self, pointer: int) -> None:
        """No longer lend that block (its request is over: the parent may reuse it)."""
        with self._lock:
            self._live.pop(pointer, None)

    def _forget(self, pointer: int) -> None:
        with self._lock:
            entry = self._live.get(pointer)
            if entry is not None and entry[0]() is None:
                del self._live[pointer]

    def lend(self, array: np.ndarray) -> tuple[str, int, int] | None:
        """The block `array` covers exactly, now lent to a response; None if none."""
        if not self._live or array.nbytes == 0 or not array.flags.c_contiguous:
            return None
        with self._lock:
            entry = self._live.get(array.ctypes.data)
            base = entry[0]() if entry is not None else None
            if base is None or base.nbytes != array.nbytes:
                return None
            location, keep = entry[1], entry[2]
            if keep:
                lent = self._lent.setdefault(location[:2], [base, 0])
                lent[1] += 1
        return location

    def give_back(self, region: str, offset: int) -> bool:
        """The parent released a lent block; False if it was not lent (our own block)."""
        if not self._lent:  # none lent: no lock (a block is lent before it is released)
            return False
        with self._lock:
            lent = self._lent.get((region, offset))
            if lent is None:
                return False
            lent[1] -= 1
            if lent[1] == 0:
                del self._lent[(region, offset)]
        return True
