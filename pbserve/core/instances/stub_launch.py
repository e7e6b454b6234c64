"""How a stub process is started: the seam, and the plain way (`python -m stub` each time).

A `StubLauncher` starts `python -m stub ARGS` for a `StubProcess` and hands back a
`LaunchedStub`: its pid, a way to kill it, and its exit code, reported once on the event
loop. Two implementations: `PlainLauncher` here (a process per stub, fork and exec from
the server, waited on by a thread), and `ZygoteLauncher` (zygote_launcher.py: forked by
a zygote that imported the stub's world once; the default). `--stub-zygote false` picks
the plain one.

Either way the stub's stdout and stderr are the write ends of two pipes the server reads
(`stdio`, stub_stdio.py) and its stdin is /dev/null; `stdio=None` (the --model-debug
stub) leaves it the server's terminal, which only the plain way gives.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from typing import Callable, Optional, Protocol, Tuple


class LaunchedStub(Protocol):
    """A started stub process, seen from the server."""

    pid: int
    returncode: int | None
    """None while it runs; then Popen's convention (-N: killed by signal N)."""

    def on_exit(self, callback: Callable[[int], None]) -> None:
        """Call `callback(returncode)` on the event loop once the process ended (at once,
        on the loop, if it has already)."""

    def kill(self) -> None:
        """SIGKILL it (nothing if it ended)."""


Stdio = Optional[Tuple[int, int]]
"""The write ends of a stub's stdout and stderr pipes; None: the server's terminal."""


class StubLauncher(Protocol):
    frontend_bells: tuple[int, ...]
    """The server's frontend processes' doorbells (frontends/slots.py), which every stub
    it starts gets (`--frontend-bell-fds`): () without frontend processes."""

    async def launch(self, python: str, args: list[str], env: dict[str, str],
                     doorbell_fd: int, stdio: Stdio, preload: tuple[str, ...] = ()
                     ) -> LaunchedStub:
        """Start `python -m stub ARGS --parent-pid P --doorbell-fd FD` with `env` (the
        launcher adds the last two: P is the stub's parent, FD its doorbell's number in
        the stub), its stdout and stderr `stdio` (the caller closes its copies after);
        an OSError or ServerError if it cannot. `preload`: the frameworks the stub will
        import (its backend's), which a launcher may have imported already."""

    async def close(self) -> None:
        """The server stops: let go of what the launcher holds (its stubs are gone)."""


class PlainLauncher:
    """`subprocess.Popen` from the server's event-loop thread (PR_SET_PDEATHSIG names
    that thread: it lives as long as the server)."""

    def __init__(self, frontend_bells: tuple[int, ...] = ()) -> None:
        self.frontend_bells = frontend_bells

    async def launch(self, python: str, args: list[str], env: dict[str, str],
                     doorbell_fd: int, stdio: Stdio, preload: tuple[str, ...] = ()
                     ) -> LaunchedStub:
        return PlainStub(asyncio.get_running_loop(), python, args, env, doorbell_fd, stdio,
                         self.frontend_bells)

    async def close(self) -> None:
        pass


class PlainStub:
    """A stub that is the server's child; a thread waits for its end."""

    def __init__(self, loop: asyncio.AbstractEventLoop, python: str, args: list[str],
                 env: dict[str, str], doorbell_fd: int, stdio: Stdio,
                 frontend_bells: tuple[int, ...] = ()) -> None:
        self._loop = loop
        if frontend_bells:
            args = [*args, "--frontend-bell-fds", ",".join(str(fd) for fd in frontend_bells)]
        self._callback: Callable[[int], None] | None = None
        self.returncode: int | None = None
        self.proc = subprocess.Popen(
            [python, "-m", "stub", *args, "--parent-pid", str(os.getpid()),
             "--doorbell-fd", str(doorbell_fd)],
            env=env, pass_fds=(doorbell_fd, *frontend_bells),
            **({} if stdio is None else  # None: the terminal's, as the server's
               {"stdin": subprocess.DEVNULL, "stdout": stdio[0], "stderr": stdio[1]}))
        self.pid = self.proc.pid
        threading.Thread(target=self._watch, daemon=True,
                         name=f"pbserve-watch-{self.pid}").start()

    def _watch(self) -> None:
        code = self.proc.wait()
        try:
            self._loop.call_soon_threadsafe(self._ended, code)
        except RuntimeError:  # the loop is closed: the server is gone already
            self.returncode = code

    def _ended(self, code: int) -> None:
        self.returncode = code
        if self._callback is not None:
            self._callback(code)

    def on_exit(self, callback: Callable[[int], None]) -> None:
        self._callback = callback
        if self.returncode is not None:
            self._loop.call_soon(callback, self.returncode)

    def kill(self) -> None:
        if self.returncode is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
