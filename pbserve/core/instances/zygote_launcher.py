"""Stubs forked by a zygote (stub/zygote.py): the default `StubLauncher`.

One zygote per interpreter, stub environment (a model's EXECUTION_ENV_PATH gets its
own) and framework (the stubs of a built-in backend's models come from a zygote that
imported its framework: `torch`, `onnxruntime`, `openvino`), started on first use from
the event-loop thread with the environment its stubs get; launch requests go over a
SOCK_SEQPACKET socket pair, the doorbell eventfd with SCM_RIGHTS. A forked stub is the
zygote's child, not the server's: the zygote reaps it and reports its exit code; the
server holds a pidfd of each stub to signal it without a pid race, and to see it end if
the zygote itself died (then the stubs die with it, by their PR_SET_PDEATHSIG). A zygote
that cannot start (an interpreter too old for it, say) is reported in the log once and
its stubs start the plain way.

A forked stub's stdout and stderr pipes go to the zygote with the doorbell (SCM_RIGHTS);
the child puts them on its fds 1 and 2. The one stub that needs the server's terminal
(--model-debug, `stdio` None) is started the plain way, and the log says so.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
from typing import Callable

from pbserve.core.instances.stub_launch import LaunchedStub, PlainLauncher, Stdio

log = logging.getLogger("pbserve.core")
READY_TIMEOUT_S = 60.0
EXIT_WAIT_S = 2.0  # a zygote that closed its socket before it was ready: its exit code
MAX_MESSAGE = 1 << 20
# Room in the zygote's argument strings for a forked stub's command line, which it
# writes there (stub/zygote.py, `_show_command_line`): `ps` shows each stub's own.
CMDLINE_ROOM = " " * 1024


class ZygoteLauncher:
    """Zygotes by (interpreter, environment, frameworks preloaded); the plain start where
    one cannot run. `frontend_bells`: StubLauncher's."""

    def __init__(self, frontend_bells: tuple[int, ...] = ()) -> None:
        self.frontend_bells = frontend_bells
        self._zygotes: dict[tuple, Zygote] = {}
        self._plain = PlainLauncher(frontend_bells)
        self._unusable: set[tuple] = set()
        self._retired: list[Zygote] = []

    def prepare(self, python: str, env: dict[str, str], preload: tuple[str, ...] = ()
                ) -> None:
        """Start the zygote of `python`, `env` and `preload` now (it imports while the
        server does other start-up work); the first launch would start it otherwise."""
        key = (python, tuple(sorted(env.items())), preload)
        if key not in self._zygotes and key not in self._unusable:
            try:
                zygote = Zygote(asyncio.get_running_loop(), python, env, preload)
            except OSError:
                return  # the launch will say why
            zygote.interpreter = _identity(os.stat(python))
            self._zygotes[key] = zygote

    async def launch(self, python: str, args: list[str], env: dict[str, str],
                     doorbell_fd: int, stdio: Stdio, preload: tuple[str, ...] = (),
                     retried: bool = False) -> LaunchedStub:
        key = (python, tuple(sorted(env.items())), preload)
        if stdio is None:  # a zygote's child cannot have the server's terminal
            name = args[args.index("--name") + 1] if "--name" in args else "?"
            log.info("instance %s has the server's terminal (--model-debug): its stub is "
                     "started the plain way, not forked by the stub zygote", name)
            return await self._plain.launch(python, args, env, doorbell_fd, stdio)
        if key in self._unusable:
            return await self._plain.launch(python, args, env, doorbell_fd, stdio)
        # As the plain start: an interpreter that is gone fails the launch, and one that
        # was replaced runs the stub (a new zygote), not the one still in memory.
        interpreter = _identity(os.stat(python))
        zygote = self._zygotes.get(key)
        if zygote is not None and zygote.interpreter != interpreter:
            self._retired.append(zygote)  # its stubs run on; it ends after the last
            zygote.retire()
            zygote = None
        if zygote is None or zygote.dead:
            zygote = self._zygotes[key] = Zygote(asyncio.get_running_loop(), python, env,
                                                 preload)
            zygote.interpreter = interpreter
        try:
            await zygote.wait_ready()
        except ZygoteUnavailable as err:
            if self._zygotes.get(key) is zygote:
                del self._zygotes[key]
            self._unusable.add(key)
            zygote.close()
            log.warning("the stub zygote of %s%s could not start (%s): its stubs start "
                        "the plain way", python,
                        f" with {', '.join(preload)}" if preload else "", err)
            return await self._plain.launch(python, args, env, doorbell_fd, stdio)
        try:
            return await zygote.launch(args, doorbell_fd, stdio, self.frontend_bells)
        except ConnectionError:
            if not zygote.dead or retried:
                raise
        # the zygote ended under this launch (killed): once more, with a new one
        return await self.launch(python, args, env, doorbell_fd, stdio, preload,
                                 retried=True)

    async def close(self) -> None:
        zygotes, self._zygotes = [*self._zygotes.values(), *self._retired], {}
        self._retired = []
        for zygote in zygotes:
            zygote.close()
        for zygote in zygotes:
            await zygote.wait_closed()


def _ended(code: int | None) -> str:
    """How a zygote ended, by its exit code (None: it had not when last looked at)."""
    if code is None:
        return "it closed its connection to the server"
    if code < 0:
        return f"it was killed by signal {-code}"
    return f"it exited with status {code}"


def _identity(stat: os.stat_result) -> tuple:
    return stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size


class ZygoteUnavailable(Exception):
    """The zygote ended or never said it was ready."""


class Zygote:
    """The server's end of one zygote process."""

    def __init__(self, loop: asyncio.AbstractEventLoop, python: str,
                 env: dict[str, str], preload: tuple[str, ...] = ()) -> None:
        self._loop = loop
        self.dead = False
        self.interpreter: tuple = ()  # the identity of its interpreter file when started
        self._retired = False  # replaced: it ends when its last stub does
        self._ready: asyncio.Future = loop.create_future()
        self._ready_failing: asyncio.Task | None = None  # _fail_ready, once it runs
        self._pending: dict[int, asyncio.Future] = {}
        self._stubs: dict[int, ZygoteStub] = {}
        self._ids = itertools.count(1)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # From the loop thread, as a plain stub: the zygote's PR_SET_PDEATHSIG names it.
            self.proc = subprocess.Popen(
                [python, "-m", "stub.zygote", "--fd", str(theirs.fileno()),
                 "--parent-pid", str(os.getpid()), "--cmdline-room", CMDLINE_ROOM,
                 *(arg for module in preload for arg in ("--preload", module))],
                env=env, stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.pid = self.proc.pid
        ours.setblocking(False)
        self._sock = ours
        loop.add_reader(ours.fileno(), self._read)

    async def wait_ready(self) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise ZygoteUnavailable(f"no answer within {READY_TIMEOUT_S:.0f} s") from None

    async def launch(self, args: list[str], doorbell_fd: int,
                     stdio: tuple[int, int], frontend_bells: tuple[int, ...] = ()
                     ) -> LaunchedStub:
        """Fork a stub; the doorbell and its stdout and stderr go to the zygote with
        SCM_RIGHTS, in that order."""
        if self.dead:
            raise ConnectionError("the stub zygote is gone")
        launch_id = next(self._ids)
        started = self._pending[launch_id] = self._loop.create_future()
        message = json.dumps({"id": launch_id, "argv": [*args, "--parent-pid",
                                                        str(self.pid)],
                              "frontend_bells": len(frontend_bells)}).encode()
        try:  # a few hundred bytes: a full socket buffer would be a stuck zygote
            socket.send_fds(self._sock, [message], [doorbell_fd, *stdio, *frontend_bells])
        except OSError:
            self._pending.pop(launch_id, None)
            raise
        return await started

    # -- from the zygote --------------------------------------------------------------
    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            self._handle(json.loads(data))

    def _handle(self, message: dict) -> None:
        if "exited" in message:
            stub = self._stubs.pop(message["exited"], None)
            if stub is not None:
                stub.ended(message["code"])
            if self._retired and not self._stubs and not self._pending:
                self.close()
        elif "started" in message:
            future = self._pending.pop(message["started"], None)
            stub = ZygoteStub(self._loop, message["pid"])
            self._stubs[stub.pid] = stub
            if future is not None and not future.done():
                future.set_result(stub)
        elif "failed" in message:
            future = self._pending.pop(message["failed"], None)
            if future is not None and not future.done():
                future.set_exception(OSError(message["error"]))
        elif "ready" in message and not self._ready.done():
            self._ready.set_result(None)

    def _lost(self) -> None:
        """The zygote ended: its stubs die with it (PR_SET_PDEATHSIG); each one's end is
        seen on its pidfd."""
        if self.dead:
            return
        self.dead = True
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        if not self._ready.done():  # its socket closed as it exits: say how it ended
            self._ready_failing = self._loop.create_task(self._fail_ready())
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the stub zygote ended"))
        self._pending.clear()
        stubs, self._stubs = list(self._stubs.values()), {}
        for stub in stubs:
            stub.orphaned()
        self.proc.poll()

    # -- ending -----------------------------------------------------------------------
    def retire(self) -> None:
        """No more launches: end once its stubs have."""
        self._retired = True
        if not self._stubs and not self._pending:
            self.close()

    async def _fail_ready(self) -> None:
        """A zygote that ended before it was ready: the wait for it fails with its exit
        status (once the process is reaped, EXIT_WAIT_S at most)."""
        deadline = self._loop.time() + EXIT_WAIT_S
        while self.proc.poll() is None and self._loop.time() < deadline:
            await asyncio.sleep(0.01)
        if not self._ready.done():
            self._ready.set_exception(ZygoteUnavailable(_ended(self.proc.returncode)))
            self._ready.exception()  # retrieved: wait_ready may never be called

    def close(self) -> None:
        """End the zygote (the server's stubs are stopped by now)."""
        self._lost()
        if self.proc.poll() is None:
            self.proc.kill()

    async def wait_closed(self) -> None:
        while self.proc.poll() is None:
            await asyncio.sleep(0.01)


class ZygoteStub:
    """A stub forked by a zygote; its exit code comes from the zygote."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pid: int) -> None:
        self._loop = loop
        self.pid = pid
        self.returncode: int | None = None
        self._callback: Callable[[int], None] | None = None
        try:
            self._pidfd = os.pidfd_open(pid)
        except OSError:  # it ended already; its "exited" follows
            self._pidfd = -1

    def ended(self, code: int) -> None:
        if self.returncode is not None:
            return
        self.returncode = code
        if self._pidfd >= 0:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._callback is not None:
            self._callback(code)

    def orphaned(self) -> None:
        """Its zygote is gone, so no exit code will come: it is SIGKILLed (its
        PR_SET_PDEATHSIG) and ends when its pidfd becomes readable."""
        if self._pidfd < 0:
            self.ended(-signal.SIGKILL)
        else:
            self._loop.add_reader(self._pidfd, self.ended, -signal.SIGKILL)

    def on_exit(self, callback: Callable[[int], None]) -> None:
        self._callback = callback
        if self.returncode is not None:
            self._loop.call_soon(callback, self.returncode)

    def kill(self) -> None:
        if self.returncode is None and self._pidfd >= 0:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
