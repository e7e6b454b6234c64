"""SIGINT and SIGTERM: the first stops the server cleanly, a second one ends it at once.

The first signal starts the shutdown of shutdown.py, and the log says that a second one
forces the exit. The clean shutdown has a deadline of its own (every step of it is
bounded: the exit timeout, the flush, the unload), and a watchdog thread holds it to that
deadline: a step that waits for good (a library's task that will not end, say) cannot keep
the server running. The forced exit, by a second signal or by the watchdog:
1. SIGKILLs the server's descendants (stubs and stub zygotes): nothing of theirs runs on;
2. unlinks the shared memory named under the server's key (theirs included) and its lock;
3. ends the process with status 1, without its remaining teardown.
Temporary folders a clean exit would remove (a cloud repository's local copy) are left;
the next start sweeps the shared memory of dead owners, not those.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time

from shm.names import unlink_owned

log = logging.getLogger("pbserve")

FORCED_EXIT_STATUS = 1
REAP_WAIT_S = 1.0  # how long the forced exit waits for the killed descendants to end


class ShutdownSignals:
    """Installs the server's SIGINT and SIGTERM handlers on `loop`; `received` is set by
    the first signal. `deadline_s`: how long the clean shutdown may take from it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deadline_s: float) -> None:
        self.received = asyncio.Event()
        self._loop = loop
        self._deadline_s = deadline_s
        self._watchdog: threading.Timer | None = None

    def install(self, signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
        for sig in signals:
            self._loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if self.received.is_set():
            force_exit(f"{name} received again during the shutdown")
        log.info("Signal received (%s): shutting down; a second Ctrl-C or SIGTERM exits "
                 "at once", name)
        self.received.set()
        self._watchdog = threading.Timer(self._deadline_s, force_exit, (
            f"the shutdown did not end within {self._deadline_s:g} s",))
        self._watchdog.daemon = True
        self._watchdog.start()

    def cancel(self) -> None:
        """The clean shutdown ended: the watchdog has nothing left to do."""
        if self._watchdog is not None:
            self._watchdog.cancel()


def force_exit(reason: str) -> None:
    """End the server now (any thread): its stubs killed, its shared memory unlinked."""
    log.error("%s: exiting now, without finishing requests or running finalize", reason)
    killed = _kill_descendants()
    _wait_ended(killed, REAP_WAIT_S)
    unlink_owned()
    logging.shutdown()  # flush the log's handlers
    os._exit(FORCED_EXIT_STATUS)


def _kill_descendants() -> list[int]:
    """SIGKILL every descendant of this process, parents first (a zygote cannot fork a
    stub once it is gone); their pids."""
    killed: list[int] = []
    todo = children(os.getpid())
    while todo:
        pid = todo.pop(0)
        kids = children(pid)  # read before the kill: a dead parent's are reparented
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed.append(pid)
        todo += kids
    return killed


def children(pid: int) -> list[int]:
    """The pids of `pid`'s children (those of every thread of it), from /proc."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return found


def _wait_ended(pids: list[int], timeout_s: float) -> None:
    """Until each of `pids` is gone or a zombie, `timeout_s` at most."""
    deadline = time.monotonic() + timeout_s
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")
