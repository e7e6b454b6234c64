"""An InputPlacer for the tests (backend/api.py InputPlacer): buffers in process memory,
a record of what it placed (sizes) and what came back (handles); nothing takes them."""

from __future__ import annotations


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
