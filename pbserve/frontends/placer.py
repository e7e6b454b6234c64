"""Where a frontend process gathers a large request's tensors as they arrive (core/api.py
`InputPlacer`): blocks of its own shm pool, which the request then names as they are (the
core passes their descriptors on to the stub). On the frontend's loop only."""

from __future__ import annotations

from pbserve.core.memory.shm_upkeep import shm_room
from pbserve.core.types import TensorData
from pbserve.errors import unavailable
from shm import Block, Pool, ShmExhausted


class PlacedInFrontend:
    """A block of the frontend's pool a decoder gathered a tensor into
    (TensorData.placed); `taken` once a request names it, or it was dropped."""

    __slots__ = ("block", "taken")

    def __init__(self, block: Block) -> None:
        self.block = block
        self.taken = False


class FrontendPlacer:
    """`place(nbytes)`: a writable view of a new block of `pool` and its handle, or None
    when it would leave less than half of /dev/shm free (the frontend gathers in process
    memory then, as the core's placer says: memory/input_placer.py); `drop`: give back a
    block no request took."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def place(self, nbytes: int) -> tuple[memoryview, PlacedInFrontend] | None:
        free, total = shm_room()
        if free - nbytes < total // 2:
            return None
        try:
            block = self._pool.alloc(nbytes)
        except ShmExhausted:
            return None
        return self._pool.view(block)[:nbytes], PlacedInFrontend(block)

    def drop(self, placed: PlacedInFrontend) -> None:
        if not placed.taken:
            placed.taken = True
            self._pool.free(placed.block.region, placed.block.offset)


def block_of(tensor: TensorData, pool: Pool) -> Block:
    """The block of `pool` that holds `tensor` for a request: the one a decoder gathered
    it into, taken now, or a copy of its bytes (ShmExhausted if there is no room)."""
    placed = tensor.placed
    if isinstance(placed, PlacedInFrontend) and not placed.taken:
        placed.taken = True
        return placed.block
    data = memoryview(tensor.data)
    if data.format != "B" or data.ndim != 1:
        data = data.cast("B")
    return pool.store(data)


def blocks_of(tensors: list[TensorData], pool: Pool) -> list[Block | None]:
    """Each tensor's block (`block_of`), None for one in a client's region (`shm`). If
    one cannot be had, those taken are given back, and no room is UNAVAILABLE."""
    blocks: list[Block | None] = []
    try:
        for tensor in tensors:
            blocks.append(None if tensor.shm is not None else block_of(tensor, pool))
    except BaseException as err:
        for block in blocks:
            if block is not None:
                pool.free(block.region, block.offset)
        if isinstance(err, ShmExhausted):
            raise unavailable(f"no room in shared memory for the request's inputs: {err}"
                              ) from None
        raise
    return blocks
