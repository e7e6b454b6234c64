"""An InputPlacer for the tests (core/api.py InputPlacer): buffers in process memory,
a record of what it placed (sizes) and what came back (handles); nothing takes them.
And the pressure step both frontends' gatherers are tested under (`move_out`)."""

from __future__ import annotations

from typing import Any


class FakePlacer:
    def __init__(self, decline: bool = False) -> None:
        self.decline = decline  # place nothing: the frontend gathers in memory
        self.placed: list[int] = []
        self.dropped: list[object] = []

    def place(self, nbytes: int) -> tuple[memoryview, object] | None:
        if self.decline:
            return None
        self.placed.append(nbytes)
        return memoryview(bytearray(nbytes)), object()

    def drop(self, handle: object) -> None:
        self.dropped.append(handle)


def move_out(pool: Any, placer: Any, request: Any) -> tuple[bytes, bool]:
    """/dev/shm runs short while `request` waits for an instance: its placed inputs move
    out to process memory (InputPlacer.relieve) and the pool gives its empty regions
    back. Its first placed input's bytes after, and whether that input's region was
    unmapped (no view of it left anywhere)."""
    tensor = next(t for t in request.inputs if t.placed is not None)
    region = pool.region(tensor.placed.block.region)
    for t in request.inputs:
        if t.placed is not None:
            t.placed.park(t)  # the request waits for an instance
    assert placer.relieve() > 0
    data = bytes(tensor.data)  # in process memory now
    assert pool.trim(force=True)  # the region is given back...
    return data, region.map.closed  # ...and unmapped, unless a view of it is left
