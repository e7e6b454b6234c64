"""Counted references to the blocks of the parent's pool.

A request's input block may be named by responses too: a model that answers with its
input as it is (identity, a pipeline stage handing a tensor on through BLS) lends that
block instead of copying it. The block then lives until the request and every response
naming it are done: each holds a reference, the last one out frees the block. Used on the
event loop's thread only.
"""

from __future__ import annotations

from pbserve.core.types import Buffer
from shm.pool import Block, Pool

Location = tuple[str, int]


class BlockRefs:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._counts: dict[Location, int] = {}

    def new(self, nbytes: int) -> Block:
        """A fresh block with one reference (its request's)."""
        block = self._pool.alloc(nbytes)
        self._counts[(block.region, block.offset)] = 1
        return block

    def view(self, block: Block) -> memoryview:
        return self._pool.view(block)

    def copy_in(self, data: Buffer) -> Block:
        """A fresh block (one reference) holding a copy of `data` (one memcpy)."""
        src = memoryview(data)
        if src.format != "B" or src.ndim != 1:
            src = src.cast("B")
        block = self._pool.store(src)
        self._counts[(block.region, block.offset)] = 1
        return block

    def is_held(self, location: Location) -> bool:
        """Whether `location` is a live block of the parent's pool."""
        return location in self._counts

    def hold(self, location: Location) -> bool:
        """One more reference; False (and nothing held) if it is not a parent block."""
        if location not in self._counts:
            return False
        self._counts[location] += 1
        return True

    def drop(self, location: Location) -> None:
        count = self._counts[location] - 1
        if count:
            self._counts[location] = count
        else:
            del self._counts[location]
            self._pool.free(*location)
