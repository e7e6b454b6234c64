"""The frontend processes' doorbells, one a slot, made by the core before any stub starts
and kept as long as the server: a frontend's doorbell is rung by the core and by every
stub that answers it directly (stub/frontends.py), so each stub gets all of them
at launch (`StubLauncher.frontend_bells`), and a frontend started again in a slot
inherits that slot's doorbell."""

from __future__ import annotations

from shm.doorbell import Doorbell


class FrontendSlots:
    def __init__(self, count: int) -> None:
        self.bells = [Doorbell() for _ in range(count)]

    def fds(self) -> tuple[int, ...]:
        return tuple(bell.fd for bell in self.bells)

    def close(self) -> None:
        for bell in self.bells:
            bell.close()
