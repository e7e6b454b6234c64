"""A frontend gathers a large request's tensors straight into the parent's shm pool, so
that the request's inputs need no copy of their own (Admission._copy_inputs takes the block
over). Used on the event loop's thread only.

A placed block has one owner at a time: the frontend from `place` on, the request once
`Admission._copy_inputs` has `take`n it (its PendingRequest then frees it as any input
block); the frontend `drop`s what no request took (an error before the request was
queued, a cancelled call, a model whose path copies anyway: an ensemble, another worker).

A request that waits for an instance keeps its placed blocks untaken until dispatched
(it `park`s them: taken then without a copy), so placed blocks are what uploads and
queues hold of /dev/shm. Both are bounded, so that the requests that run always find
room for their outputs however many wait (a 64 MiB /dev/shm, docker's default, with
eight 16 MiB requests in flight: tests/core/test_small_shm.py): `place` declines unless half
of /dev/shm stays free after it, and the frontend gathers in process memory instead
(copied into shm when dispatched, as before); and when /dev/shm runs short (ShmUpkeep.relieve),
`relieve` moves every waiting request's tensors out to process memory and places
nothing for PRESSURE_HOLD_S (else new uploads would take what the others gave back
before the allocation that ran short is tried again).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.memory.shm_upkeep import shm_room
from shm import Block, ShmExhausted

_PLACED, _TAKEN, _DROPPED = 0, 1, 2
PRESSURE_HOLD_S = 1.0  # after /dev/shm ran short, nothing is placed for this long


class PlacedBlock:
    """A parent pool block a frontend wrote a tensor into (TensorData.placed)."""

    __slots__ = ("block", "_state", "_placer", "_tensor")

    def __init__(self, block: Block, placer: InputPlacer) -> None:
        self.block = block
        self._state = _PLACED
        self._placer = placer
        self._tensor: Any = None  # the TensorData viewing it, while its request waits

    def park(self, tensor: Any) -> None:
        """`tensor`'s request waits for an instance with the block untaken: under
        pressure its bytes may move out to process memory (`InputPlacer.relieve`)."""
        if self._state == _PLACED:
            self._tensor = tensor
            self._placer._parked.add(self)

    def take(self) -> bool:
        """Make the block the caller's (a request's input); False when it is not the
        frontend's to give any more."""
        if self._state != _PLACED:
            return False
        self._state = _TAKEN
        if self._tensor is not None:
            self._tensor = None
            self._placer._parked.discard(self)
        return True

    def give_back(self) -> None:
        """Undo `take` (the request failed before it was queued with the block)."""
        if self._state == _TAKEN:
            self._state = _PLACED


class InputPlacer:
    """`place(nbytes)`: a writable view of a new block and its PlacedBlock, or None when
    it would leave less than half of /dev/shm free (`room`: its free and total bytes)
    or /dev/shm ran short lately (the frontend gathers in memory instead);
    `drop(placed)` gives back a block no request took."""

    def __init__(self, refs: BlockRefs,
                 room: Callable[[], tuple[int, int]] = shm_room) -> None:
        self._refs = refs
        self._room = room
        self._parked: set[PlacedBlock] = set()
        self._hold_until = 0.0  # monotonic time until which nothing is placed

    def place(self, nbytes: int) -> tuple[memoryview, PlacedBlock] | None:
        if time.monotonic() < self._hold_until:
            return None
        free, total = self._room()
        if free - nbytes < total // 2:
            return None
        try:
            block = self._refs.new(nbytes)
        except ShmExhausted:
            return None
        return self._refs.view(block)[:nbytes], PlacedBlock(block, self)

    def drop(self, placed: PlacedBlock) -> None:
        if placed.take():
            block = placed.block
            self._refs.drop((block.region, block.offset))

    def relieve(self) -> int:
        """/dev/shm is short: each waiting request's placed tensor is copied into process
        memory (its request copies it into shm when dispatched) and its block given
        back, and nothing is placed for PRESSURE_HOLD_S. The bytes given back."""
        self._hold_until = time.monotonic() + PRESSURE_HOLD_S
        freed = 0
        for placed in list(self._parked):
            tensor = placed._tensor
            tensor.data = bytes(tensor.data)
            tensor.placed = None
            freed += placed.block.nbytes
            self.drop(placed)
        return freed
