"""A frontend gathers a large request's tensors straight into the parent's shm pool, so
that the request's inputs need no copy of their own (Model._copy_inputs takes the block
over). Used on the event loop's thread only.

A placed block has one owner at a time: the frontend from `place` on, the request once
`Model._copy_inputs` has `take`n it (its PendingRequest then frees it as any input
block); the frontend `drop`s what no request took (an error before the request was
queued, a cancelled call, a model whose path copies anyway: an ensemble, another worker).
"""

from __future__ import annotations

from pbserve.backend.instances.block_refs import BlockRefs
from shm import Block, ShmExhausted

_PLACED, _TAKEN, _DROPPED = 0, 1, 2


class PlacedBlock:
    """A parent pool block a frontend wrote a tensor into (TensorData.placed)."""

    __slots__ = ("block", "_state")

    def __init__(self, block: Block) -> None:
        self.block = block
        self._state = _PLACED

    def take(self) -> bool:
        """Make the block the caller's (a request's input); False when it is not the
        frontend's to give any more."""
        if self._state != _PLACED:
            return False
        self._state = _TAKEN
        return True

    def give_back(self) -> None:
        """Undo `take` (the request failed before it was queued with the block)."""
        if self._state == _TAKEN:
            self._state = _PLACED


class InputPlacer:
    """`place(nbytes)`: a writable view of a new block and its PlacedBlock, or None when
    /dev/shm cannot take it now (the frontend gathers in memory instead); `drop(placed)`
    gives back a block no request took."""

    def __init__(self, refs: BlockRefs) -> None:
        self._refs = refs

    def place(self, nbytes: int) -> tuple[memoryview, PlacedBlock] | None:
        try:
            block = self._refs.new(nbytes)
        except ShmExhausted:
            return None
        return self._refs.view(block)[:nbytes], PlacedBlock(block)

    def drop(self, placed: PlacedBlock) -> None:
        if placed.take():
            block = placed.block
            self._refs.drop((block.region, block.offset))
