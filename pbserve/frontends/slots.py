"""The frontend processes' doorbells, one a slot, made by the core before any stub starts
and kept as long as the server: a frontend's doorbell is rung by the core and by every
stub that answers it directly (stub/frontends.py), so each stub gets all of them
at launch (`StubLauncher.frontend_bells`), and a frontend started again in a slot
inherits that slot's doorbell (and its connection count, reset)."""

from __future__ import annotations

from pbserve.frontends.connection_counts import ConnectionCounts
from shm.doorbell import Doorbell


class FrontendSlots:
    """The slots' doorbells, and the connections each slot's frontend holds (its accept
    loop's gate: connection_counts.py)."""

    def __init__(self, count: int) -> None:
        self.bells = [Doorbell() for _ in range(count)]
        self.connections = ConnectionCounts.create(count)

    def fds(self) -> tuple[int, ...]:
        return tuple(bell.fd for bell in self.bells)

    def close(self) -> None:
        for bell in self.bells:
            bell.close()
        self.connections.close()
