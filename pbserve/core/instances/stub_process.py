"""One stub child process and the three shm queues to it, seen from the parent.

It knows nothing of models: it starts `python -m stub` (through a `StubLauncher`,
stub_launch.py: forked by a zygote, or the plain way), turns the up queue into calls
of `on_messages(batch)` on the parent's event loop (the stub rings a doorbell, an
eventfd the loop watches, and the loop drains the queue: shm/doorbell.py), reports the
process's exit with `on_exit(returncode)`, and removes every shm name of the stub when it
is closed.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import hashlib
import itertools
import os
import shutil
import sys
import tempfile
import logging
from pathlib import Path
from typing import Callable, Sequence

import posix_ipc

from pbserve.core.latency.queue_watch import QueueWatch
from pbserve.private_dir import UntrustedDirectory, check_private
from pbserve.core.instances.stub_launch import LaunchedStub, StubLauncher
from pbserve.core.instances.stub_stdio import StubOutput
from pbserve.secret_env import SECRET_ENV
from shm.doorbell import Doorbell
from shm.names import new_prefix, unlink_prefix
from shm.pool import ShmSizes
from shm.queue import MessageQueue, QueueFull
from stub import protocol as p
from stub.frontends import FIRST_STUB_ORIGIN, origin_of
from stub.inbox import bell_name
from stub.stub import caller_queue_names, frontend_queue_names, queue_names

log = logging.getLogger("pbserve.core")
FRONTEND_QUEUE_CAPACITY = 256 << 10  # a frontend's requests to one stub, its answers
_ORIGINS = itertools.count()  # StubProcess.origin
_PROJECT_ROOT = Path(__file__).resolve().parents[3]
# What a stub imports of pbserve: the stub and what the model sees, nothing else.
_STUB_MODULES = ("stub", "shm", "backend_utils", "triton_python_backend_utils.py",
                 "c_python_backend_utils.py")


def _stub_path() -> str:
    """A directory holding only the stub's packages (links to them), for PYTHONPATH.

    Not the directory they are installed in: with a regular install that is the whole
    site-packages of the server, which would shadow a model environment's own packages.
    Shared by this user's servers of one install, under a fixed name in the temp dir; one
    that another user could have made (private_dir.check_private) is never used: this
    server then makes a private one of its own, removed when it exits.
    """
    digest = hashlib.sha256(str(_PROJECT_ROOT).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"pbserve_stub_path_{os.getuid()}_{digest}"
    if not os.path.lexists(path):
        scratch = _linked_stub_modules(path.parent, path.name + "-")
        try:
            scratch.rename(path)
        except OSError:  # another process made it first
            shutil.rmtree(scratch, ignore_errors=True)
    try:
        return str(check_private(path))
    except UntrustedDirectory as err:
        return _own_stub_path(str(err))


def _linked_stub_modules(parent: Path, prefix: str) -> Path:
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    for name in _STUB_MODULES:
        (scratch / name).symlink_to(_PROJECT_ROOT / name)
    return scratch


@functools.cache
def _own_stub_path(reason: str) -> str:
    log.warning("%s; the stubs of this server import from a private directory instead", reason)
    path = _linked_stub_modules(Path(tempfile.gettempdir()), "pbserve_stub_path_own_")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return str(path)


def stub_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment, with pbserve's stub packages importable by the stub,
    without the server's secrets (pbserve.secret_env)."""
    env = {key: value for key, value in os.environ.items() if key not in SECRET_ENV}
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = _stub_path() + (os.pathsep + path if path else "")
    if extra:
        env.update(extra)
    return env


class StubProcess:
    """Made by `start`, once the process runs."""

    def __init__(self, instance_name: str, loop: asyncio.AbstractEventLoop,
                 on_messages: Callable[[list[tuple]], None],
                 on_exit: Callable[[int], None], queue_capacity: int = 1 << 20,
                 frontend_slots: int = 0) -> None:
        self.instance_name = instance_name
        self.prefix = new_prefix()
        self._loop = loop
        self._on_messages = on_messages
        self._on_exit = on_exit
        self._closing = False
        self._watch = QueueWatch(loop, lambda: self.up_q.pending(), self._drain,
                                 lambda: not self._closing)
        self.process: LaunchedStub | None = None
        queues: list[MessageQueue] = []
        self._bell: posix_ipc.Semaphore | None = None
        self.frontend_queues: list[tuple[str, str]] = []  # each frontend slot's two
        try:  # what a failed start made (no fds left) is removed here
            for name in queue_names(self.prefix):
                queues.append(MessageQueue.create(name, queue_capacity))
            if frontend_slots:  # else the stub waits on its main queue itself
                self._bell = posix_ipc.Semaphore(bell_name(self.prefix), posix_ipc.O_CREX,
                                                 0o600, 0)
            for slot in range(frontend_slots):
                names = frontend_queue_names(self.prefix, slot)
                for name in names:
                    queues.append(MessageQueue.create(name, FRONTEND_QUEUE_CAPACITY))
                self.frontend_queues.append(names)
            self._doorbell = Doorbell()
        except BaseException:
            for queue in queues:
                queue.unlink()
                queue.close()
            self._unlink_bell()
            unlink_prefix(self.prefix)
            raise
        self.main_q, self.control_q, self.up_q = queues[:3]
        self.bell_name = bell_name(self.prefix)
        self._frontend_qs = queues[3:]  # closed with the others; a frontend attaches
        self._generations = [0] * frontend_slots
        # the origin of this stub's direct BLS calls to other stubs (stub/direct_bls.py):
        # above every frontend slot's (slot + 1), never reused while the server runs
        self.origin = FIRST_STUB_ORIGIN + next(_ORIGINS)
        self._callers: dict[int, list[MessageQueue]] = {}  # origin -> its two queues here
        # the frontend processes (origins) that read this stub's answers to the requests
        # the core sends it for them (Model.direct_route); others are answered the old way
        self.answers_read_by: set[int] = set()

    @classmethod
    async def start(cls, instance_name: str, loop: asyncio.AbstractEventLoop,
                    on_messages: Callable[[list[tuple]], None],
                    on_exit: Callable[[int], None], launcher: StubLauncher,
                    python: str | None = None, queue_capacity: int = 1 << 20,
                    sizes: ShmSizes = ShmSizes(),
                    debug_args: Sequence[str] = (),
                    preload: tuple[str, ...] = ()) -> StubProcess:
        """Make the queues and the doorbell and start `python -m stub` with `launcher`;
        on failure nothing of it is left. `debug_args`: model_debug.py's; with
        --debug-terminal the stub gets the server's terminal, else its stdout and stderr
        are pipes whose lines go to the log (stub_stdio.py). `preload`: the frameworks
        its model's backend imports (launch's)."""
        self = cls(instance_name, loop, on_messages, on_exit, queue_capacity,
                   len(launcher.frontend_bells))
        reads: list[int] = []  # stdout's and stderr's pipes, unless on the terminal
        writes: list[int] = []
        try:
            if "--debug-terminal" not in debug_args:
                for _ in range(2):
                    read, write = os.pipe2(os.O_CLOEXEC)
                    reads.append(read)
                    writes.append(write)
            self.process = await launcher.launch(
                python or sys.executable,
                ["--prefix", self.prefix, "--name", instance_name,
                 "--shm-default-byte-size", str(sizes.default),
                 "--shm-growth-byte-size", str(sizes.growth),
                 "--cuda-memory-pool-byte-size",
                 ",".join(f"{gpu}:{size}" for gpu, size in sizes.cuda), *debug_args],
                stub_environment(), self._doorbell.fd,
                (writes[0], writes[1]) if writes else None, preload)
        except BaseException:
            for fd in reads:
                os.close(fd)
            self._closing = True
            self._close_shm()
            raise
        finally:  # the stub has its copies of the write ends (or did not start)
            for fd in writes:
                os.close(fd)
        self.output = StubOutput(instance_name, open(reads[0], "rb", buffering=0),
                                 open(reads[1], "rb", buffering=0)) if reads else None
        self.pid = self.process.pid
        self.process.on_exit(self._exited)
        loop.add_reader(self._doorbell.fd, self._drain)
        return self

    # -- sending ----------------------------------------------------------------------
    def send(self, message: tuple) -> None:
        if self.main_q.put(p.encode(message)):
            self._ring()

    def _ring(self) -> None:
        """After a put that found the main queue empty: the stub may sleep on its bell
        (stub/inbox.py)."""
        bell = self._bell
        if bell is not None:
            try:
                bell.release()
            except posix_ipc.ExistentialError:
                pass

    def offer(self, message: tuple) -> bool:
        """`message` on the main queue only if nothing waits there (so a stub that does
        not read its queue gets one such message, not a queue full, and never blocks
        the parent's loop); whether it was put."""
        if self.main_q.pending():
            return False
        try:
            if self.main_q.put(p.encode(message), timeout=0):
                self._ring()
        except QueueFull:
            return False
        return True

    def announce(self) -> None:
        """Tell the stub a request is on its way: it wakes and polls for it
        (stub/stub.py `_expect_request`) while this process still prepares it. Not
        while a message waits unread: a stub that does not read (stopped, hung) gets
        one announcement, not a queue full of them."""
        if not self.main_q.pending() and self.main_q.wake():
            self._ring()

    def renew_frontend_queues(self, slot: int) -> None:
        """Frontend process `slot` died and starts again: new queues between it and this
        stub (the dead one's are in a state only it knew), told to the stub before the
        new process can ask for them (the stub frees what the dead one held)."""
        self.answers_read_by.discard(origin_of(slot))  # the new process knows nothing yet
        generation = self._generations[slot] = self._generations[slot] + 1
        names = frontend_queue_names(self.prefix, slot, generation)
        fresh = [MessageQueue.create(name, FRONTEND_QUEUE_CAPACITY) for name in names]
        old = self._frontend_qs[2 * slot:2 * slot + 2]
        self._frontend_qs[2 * slot:2 * slot + 2] = fresh
        self.frontend_queues[slot] = names
        self.send(p.frontend_queues(slot, *names))
        for queue in old:  # the stub has them mapped until it attaches the new ones
            queue.unlink()
            queue.close()

    @property
    def has_bell(self) -> bool:
        """Whether other processes may send to the stub directly (frontend processes, and
        with them other stubs' BLS calls): it waits on its bell, not its main queue."""
        return self._bell is not None

    def caller_queues(self, origin: int, bell: str) -> tuple[str, str]:
        """The queues the stub of `origin` sends this stub direct BLS calls on and is
        answered on (made on the first ask, told to this stub before the caller gets
        them); `bell`: the caller's semaphore, posted when an answer comes."""
        queues = self._callers.get(origin)
        if queues is None:
            names = caller_queue_names(self.prefix, origin)
            queues = self._callers[origin] = [
                MessageQueue.create(name, FRONTEND_QUEUE_CAPACITY) for name in names]
            self.send(p.caller_queues(origin, *names, bell))
        return queues[0].name, queues[1].name

    def caller_gone(self, origin: int) -> None:
        """The stub of `origin` ended: this stub forgets it, and its queues go."""
        queues = self._callers.pop(origin, None)
        if queues is not None:
            if not self._closing:
                self.send(p.caller_gone(origin))
            for queue in queues:  # the stub has them mapped until it forgets them
                queue.unlink()
                queue.close()

    def send_control(self, message: tuple) -> None:
        self.control_q.put(p.encode(message))

    # -- receiving --------------------------------------------------------------------
    def _drain(self) -> None:
        """On the loop, when the doorbell rang: every message on the up queue, as one
        batch. The bell is cleared first, so a message put after this pass rings again."""
        self._doorbell.clear()
        get, decode = self.up_q.get, p.decode
        batch = []
        try:
            while (raw := get(0)) is not None:
                if raw:
                    batch.append(decode(raw))
        except Exception:  # noqa: BLE001 - a broken stub must not break the server
            if not self._closing:
                log.exception("reading stub '%s' failed", self.instance_name)
        if batch and not self._closing:
            self._on_messages(batch)

    def read_now(self) -> None:
        """The up queue read now, not waiting for the doorbell (Model.read_stubs)."""
        if not self._closing:
            self._drain()

    def watch_up(self, budget_ns: int) -> None:
        """Poll the up queue once per turn of the event loop, for at most `budget_ns`
        (latency/queue_watch.py): the reply of a short `execute` is read without the
        loop sleeping in epoll and being woken by the doorbell."""
        self._watch.extend(budget_ns)

    def _exited(self, code: int) -> None:
        if not self._closing:
            # What the stub put before it ended is read before its end is told: the exit
            # (a pidfd, the zygote's word) and the doorbell come in either order, and a
            # stub whose model failed to load says why, then exits at once.
            self._drain()
            self._on_exit(code)

    # -- ending -----------------------------------------------------------------------
    @property
    def returncode(self) -> int | None:
        return self.process.returncode if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    async def wait_exit(self, timeout: float) -> bool:
        """Wait for the process to end; False on timeout."""
        deadline = self._loop.time() + timeout
        while self.alive():
            if self._loop.time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def close(self) -> None:
        """Stop watching the stub and remove every shm name of it (queues, its pool).

        Called on the loop once the process is gone (or killed): nothing of it may
        outlive this.
        """
        self._closing = True
        self.kill()
        if self._doorbell.fd >= 0:
            self._loop.remove_reader(self._doorbell.fd)
        self._close_shm()

    def _close_shm(self) -> None:
        self._doorbell.close()
        callers = [queue for queues in self._callers.values() for queue in queues]
        self._callers.clear()
        for queue in (self.main_q, self.control_q, self.up_q, *self._frontend_qs, *callers):
            queue.unlink()
            queue.close()
        self._unlink_bell()
        unlink_prefix(self.prefix)

    def _unlink_bell(self) -> None:
        bell, self._bell = self._bell, None
        if bell is not None:
            bell.close()
            try:
                posix_ipc.unlink_semaphore(bell.name)
            except posix_ipc.ExistentialError:
                pass
