"""`--frontend-processes N`: the core's N frontend processes, started, restarted when one
dies, and stopped with the server.

Each is `python -m pbserve.cli.frontend_process` with the server's own command line (so
it parses the same flags), its channel (channel.py), and the HTTP and gRPC listening
sockets the core bound before the models loaded (server/endpoints.py): each frontend
accepts on those, one connection at a time and only while it holds no more than any
other (server/gated_accept.py, connection_counts.py), so that connections are spread
evenly, a client's two too. The server is ready once every frontend serves. The core
keeps the metrics endpoint. A frontend dies with the core
(PR_SET_PDEATHSIG, stub/parent_death.py); one that dies alone is started again after
RESTART_DELAY_S, its requests cancelled in the models (link.py); the others serve on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

from pbserve.core.api import InferenceCore
from pbserve.frontends.calls import CoreCalls
from pbserve.frontends.channel import CoreEnd
from pbserve.frontends.link import FrontendLink
from pbserve.frontends.slots import FrontendSlots
from pbserve.server.endpoints import Endpoints

log = logging.getLogger("pbserve.frontends")

RESTART_DELAY_S = 0.5
STARTED_TIMEOUT_S = 60.0


class FrontendProcess:
    """One frontend process and its link; `on_exit(code)` on the loop when it ends."""

    def __init__(self, index: int, link: FrontendLink, channel: CoreEnd,
                 proc: subprocess.Popen, on_exit: Callable[[FrontendProcess, int], None]
                 ) -> None:
        self.index = index
        self.link = link
        self.channel = channel
        self.proc = proc
        self.pid = proc.pid
        self.returncode: int | None = None
        self.retired = False  # what it left was cleaned up
        self.exited = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()

        def watch() -> None:
            code = proc.wait()
            try:
                loop.call_soon_threadsafe(ended, code)
            except RuntimeError:  # the loop is closed: the server is gone already
                pass

        def ended(code: int) -> None:
            self.returncode = code
            if not self.exited.done():
                self.exited.set_result(code)
            on_exit(self, code)
        threading.Thread(target=watch, daemon=True, name=f"pbserve-frontend-{index}").start()

    def signal(self, signum: int) -> None:
        if self.returncode is None:
            try:
                self.proc.send_signal(signum)
            except ProcessLookupError:
                pass


class FrontendProcesses:
    """A frontend process in each of `slots` serving `core` on `endpoints`' HTTP and gRPC
    sockets;
    `argv`: the server's command line; `link_services`: what a link needs of the core
    beyond its InferenceCore (`make_link(name, channel)`)."""

    def __init__(self, slots: FrontendSlots, core: InferenceCore, endpoints: Endpoints,
                 argv: Sequence[str],
                 make_link: Callable[[str, CoreEnd, CoreCalls], FrontendLink],
                 calls: CoreCalls) -> None:
        self._slots = slots
        self._core = core
        self._argv = list(argv)
        self._make_link = make_link
        self._calls = calls
        self._sockets: dict[str, list[int]] = {}
        for name in ("http", "grpc"):
            listener = getattr(endpoints, name)
            if listener is not None:
                self._sockets[name] = listener.fds()
        self._processes: dict[int, FrontendProcess] = {}
        self.serving = False  # every frontend started serving (the server's readiness)
        self._stopping = False
        self._restarts: set[asyncio.Task] = set()
        self.on_link: Callable[[FrontendLink | None, FrontendLink | None], None] = \
            lambda _old, _new: None  # the server's upkeep adds and drops links
        # a dead process's slot: the stubs renew their queues to it (direct requests)
        self.on_slot_gone: Callable[[int], None] = lambda _slot: None

    @property
    def processes(self) -> list[FrontendProcess]:
        return [self._processes[i] for i in sorted(self._processes)]

    async def start(self) -> None:
        """Start them all, and wait until each serves (STARTED_TIMEOUT_S at most, then
        the log says which did not): the server's readiness waits for every frontend, so
        that a client's first connections are spread over all of them."""
        for index in range(len(self._slots.bells)):
            self._start(index)
        waits = {asyncio.ensure_future(p.link.started.wait()): p for p in self.processes}
        _, late = await asyncio.wait(waits, timeout=STARTED_TIMEOUT_S)
        for wait in late:
            wait.cancel()
            log.error("frontend process %d did not start serving within %.0f s",
                      waits[wait].index, STARTED_TIMEOUT_S)
        self.serving = True

    def _start(self, index: int) -> None:
        channel = CoreEnd.create(self._slots.bells[index])
        link = self._make_link(f"frontend-{index}", channel, self._calls)
        fds = [*channel.pass_fds(), self._slots.connections.fd]
        listen = []
        for name, sockets in self._sockets.items():
            fds += sockets
            listen.append(f"{name}=" + ":".join(str(fd) for fd in sockets))
        args = [sys.executable, "-m", "pbserve.cli.frontend_process", "--channel",
                channel.spec().as_arg(), "--index", str(index),
                "--parent-pid", str(os.getpid()), "--listen", ";".join(listen),
                "--connections", str(self._slots.connections.fd),
                "--", *self._argv]
        try:
            proc = subprocess.Popen(args, pass_fds=fds, stdin=subprocess.DEVNULL)
        except BaseException:
            channel.close()
            raise
        link.start()
        self._processes[index] = FrontendProcess(index, link, channel, proc, self._exited)
        self.on_link(None, link)
        log.info("Started frontend process %d (pid %d)", index, proc.pid)

    def _exited(self, process: FrontendProcess, code: int) -> None:
        if self._processes.get(process.index) is not process:
            return
        if self._stopping:
            return
        status = f"signal {-code}" if code < 0 else f"status {code}"
        log.error("frontend process %d (pid %d) exited with %s: its requests are "
                  "cancelled, and it is started again", process.index, process.pid, status)
        task = asyncio.get_running_loop().create_task(self._restart(process))
        self._restarts.add(task)
        task.add_done_callback(self._restarts.discard)

    async def _restart(self, process: FrontendProcess) -> None:
        await self._retire(process)
        await asyncio.sleep(RESTART_DELAY_S)
        if not self._stopping and self._processes.get(process.index) is process:
            self._start(process.index)

    async def _retire(self, process: FrontendProcess) -> None:
        """What a process that ended left: its requests, its responses, its shm."""
        if process.retired:
            return
        process.retired = True
        self._slots.connections.set_unavailable(process.index)  # the others take them
        self.on_link(process.link, None)
        if not self._stopping:
            self.on_slot_gone(process.index)
        await process.link.close()
        process.channel.close()

    async def close(self, grace: float) -> None:
        """Stop every frontend (SIGTERM: each drains its connections as a server does,
        for `grace` s at most, then SIGKILL)."""
        self._stopping = True
        for task in list(self._restarts):
            task.cancel()
        processes = list(self._processes.values())
        for process in processes:
            process.signal(signal.SIGTERM)
        if processes:
            _, late = await asyncio.wait([p.exited for p in processes], timeout=grace)
            for process in processes:
                if not process.exited.done():
                    log.warning("frontend process %d did not stop within %.0f s: killed",
                                process.index, grace)
                    process.signal(signal.SIGKILL)
            if late:
                await asyncio.wait(late, timeout=5.0)
        for process in processes:
            await self._retire(process)
        self._processes.clear()
