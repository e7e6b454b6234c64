"""The shared memory between one frontend process and the core: two message queues and
two doorbells (shm/doorbell.py), one of each a way.

The core makes them (`CoreEnd.create`) under its own shm key, so what a killed server
leaves is swept with the rest of its names; the frontend process inherits the two
eventfds and attaches the queues by name (`FrontendEnd.attach`). Each side puts, then
rings the other's bell; each clears its own bell, then drains its queue (the order that
loses no wake-up, as between the parent and a stub).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass

from pbserve.core.latency.queue_watch import QueueWatch
from pbserve.frontends import protocol as fp
from shm.doorbell import Doorbell, ring
from shm.names import new_prefix, unlink_prefix
from shm.queue import MessageQueue

QUEUE_CAPACITY = 4 << 20  # a repository index or a model's config goes in one message


@dataclass(frozen=True)
class ChannelSpec:
    """What a frontend process is told on its command line: its shm prefix (its queues
    and its pool's regions are named under it) and its two eventfds' numbers."""

    prefix: str
    core_bell_fd: int  # rung by the frontend: the core's loop watches it
    frontend_bell_fd: int  # rung by the core: the frontend's loop watches it

    def as_arg(self) -> str:
        return f"{self.prefix},{self.core_bell_fd},{self.frontend_bell_fd}"

    @classmethod
    def parse(cls, text: str) -> ChannelSpec:
        prefix, core_fd, frontend_fd = text.rsplit(",", 2)
        return cls(prefix, int(core_fd), int(frontend_fd))


def _queue_names(prefix: str) -> tuple[str, str]:
    return prefix + "-up", prefix + "-down"


class _End:
    """What both ends share: `send` puts and rings; `start` drains on each ring."""

    def __init__(self, up: MessageQueue, down: MessageQueue, incoming: MessageQueue,
                 my_bell_fd: int, peer_bell_fd: int) -> None:
        self.up, self.down = up, down
        self._incoming = incoming
        self._outgoing = down if incoming is up else up
        self._my_bell_fd = my_bell_fd
        self._peer_bell_fd = peer_bell_fd
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_messages: Callable[[list], None] | None = None
        self._watch: QueueWatch | None = None  # made by `start`, on the loop

    def send(self, message: tuple) -> None:
        if self._outgoing.put(fp.encode(message)):
            ring(self._peer_bell_fd)

    def start(self, on_messages: Callable[[list], None],
              also: Callable[[], None] | None = None) -> None:
        """Call `on_messages(batch)` on the running loop with every message that came,
        each time the peer rings; then `also()` (what else rings this doorbell: the
        stubs a frontend sends requests to directly, frontends/direct.py)."""
        loop = self._loop = asyncio.get_running_loop()
        self._on_messages = on_messages
        self._watch = QueueWatch(loop, self._incoming.pending,
                                 lambda: self.drain_into(on_messages),
                                 lambda: self._on_messages is not None)

        def drain() -> None:
            try:
                os.eventfd_read(self._my_bell_fd)
            except BlockingIOError:
                pass
            self.drain_into(on_messages)
            if also is not None:
                also()
        loop.add_reader(self._my_bell_fd, drain)

    def watch(self, budget_ns: int) -> None:
        """Poll the incoming queue once a turn of the loop for at most `budget_ns`, as
        the core watches a stub's reply (latency/queue_watch.py)."""
        if self._watch is not None:
            self._watch.extend(budget_ns)

    def drain_into(self, on_messages: Callable[[list], None]) -> None:
        get, decode = self._incoming.get, fp.decode
        batch = []
        while (data := get(0)) is not None:
            batch.append(decode(data))
        if batch:
            on_messages(batch)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self._my_bell_fd)
            self._loop = None
        self._on_messages = None


class CoreEnd(_End):
    """The core's end: it made the queues and both eventfds; it reads `up`."""

    def __init__(self, prefix: str, up: MessageQueue, down: MessageQueue,
                 core_bell: Doorbell, frontend_bell: Doorbell) -> None:
        super().__init__(up, down, up, core_bell.fd, frontend_bell.fd)
        self.prefix = prefix
        self._bells = (core_bell, frontend_bell)

    @classmethod
    def create(cls, frontend_bell: Doorbell) -> CoreEnd:
        """`frontend_bell`: the slot's (slots.py), which outlives the channel."""
        prefix = new_prefix() + "-fe"
        queues: list[MessageQueue] = []
        try:
            for name in _queue_names(prefix):
                queues.append(MessageQueue.create(name, QUEUE_CAPACITY))
            core_bell = Doorbell()
        except BaseException:
            for queue in queues:
                queue.unlink()
                queue.close()
            raise
        return cls(prefix, queues[0], queues[1], core_bell, frontend_bell)

    def spec(self) -> ChannelSpec:
        return ChannelSpec(self.prefix, self._bells[0].fd, self._bells[1].fd)

    def pass_fds(self) -> tuple[int, int]:
        return self._bells[0].fd, self._bells[1].fd

    def close(self) -> None:
        """Remove everything of the channel, and what the frontend named under its
        prefix (its pool's regions, were it killed)."""
        self.stop()
        for queue in (self.up, self.down):
            queue.unlink()
            queue.close()
        self._bells[0].close()  # the frontend's is its slot's
        unlink_prefix(self.prefix)


class FrontendEnd(_End):
    """The frontend process's end: it reads `down`."""

    @classmethod
    def attach(cls, spec: ChannelSpec) -> FrontendEnd:
        up, down = (MessageQueue.attach(name) for name in _queue_names(spec.prefix))
        return cls(up, down, down, spec.frontend_bell_fd, spec.core_bell_fd)

    def get(self, timeout: float) -> tuple | None:
        """One message from the core, waiting up to `timeout` s (a call that must be
        answered before the loop goes on: calls.py)."""
        data = self.down.get(timeout)
        return None if data is None else fp.decode(data)

    def close(self) -> None:
        self.stop()
        for queue in (self.up, self.down):
            queue.close()
