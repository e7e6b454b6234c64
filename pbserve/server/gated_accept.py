"""Accepting connections one at a time, while a gate allows: the accept loop of frontend
processes, which share one listening socket (pbserve/frontends/connection_counts.py).

asyncio's `create_server` accepts up to its backlog each time the socket is readable, so
the first process awake takes a whole burst of connections, and SO_REUSEPORT spreads
them by a hash of their addresses, which puts both of a client's two connections on one
process about half the time. Here each process asks its gate before each `accept`: the
gate says yes while this process holds no more connections than any other serving one.
A process the gate holds back stops watching the socket and asks again after
RECHECK_S, so it neither spins on a readable socket nor misses one: the others, still
watching, take the connection meanwhile. If none does for HELD_S (the one the gate
favours is stuck), it takes the connection anyway: a stuck frontend delays new
connections by that much, it does not keep them out.

Ordering: the gate counts a connection as opened at `accept`, before its protocol
exists, and as closed once: when its protocol's `connection_lost` runs, or when setting
it up fails, whichever comes first.
"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("pbserve.server")

RECHECK_S = 0.02  # how soon a process held back asks its gate again
HELD_S = 0.1  # a connection none of the favoured processes took in this time is taken


class AcceptGate(Protocol):
    """Whether this process may take the next connection, and its count of them; called
    on the event loop's thread only."""

    def may_accept(self) -> bool: ...

    def opened(self) -> None: ...

    def closed(self) -> None: ...


class GatedServer:
    """One listening socket served through `gate`: `factory()` makes each connection's
    protocol; `options`: connect_accepted_socket's (ssl, ssl_handshake_timeout). What
    `Servers` uses of an asyncio server: `sockets`, `close`, `wait_closed`."""

    def __init__(self, sock: socket.socket, factory: Callable[[], asyncio.BaseProtocol],
                 gate: AcceptGate, **options: Any) -> None:
        self._loop = asyncio.get_running_loop()
        self._sock = sock
        self._factory = factory
        self._gate = gate
        self._options = options
        self._tcp = sock.family in (socket.AF_INET, socket.AF_INET6)
        self._recheck: asyncio.TimerHandle | None = None
        self._held_since: float | None = None  # held back while a connection waits
        self._setups: set[asyncio.Task] = set()
        self._closed = False
        self._loop.add_reader(sock.fileno(), self._readable)

    @property
    def sockets(self) -> list[socket.socket]:
        return [] if self._closed else [self._sock]

    def _readable(self) -> None:
        if not self._gate.may_accept():
            now = self._loop.time()
            if self._held_since is None:
                self._held_since = now
            if now - self._held_since < HELD_S:
                self._pause(RECHECK_S)
                return
        self._held_since = None
        try:
            conn, _ = self._sock.accept()
        except (BlockingIOError, InterruptedError):
            return  # another process took it
        except OSError as exc:  # out of descriptors, say: wait, as asyncio's servers do
            log.warning("accepting a connection failed: %s", exc)
            self._pause(1.0)
            return
        self._gate.opened()
        conn.setblocking(False)
        if self._tcp:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = self._loop.create_task(self._set_up(conn))
        self._setups.add(task)
        task.add_done_callback(self._setups.discard)

    def _pause(self, seconds: float) -> None:
        """Stop watching the socket; watch it again after `seconds` (`_watch`)."""
        self._loop.remove_reader(self._sock.fileno())
        self._recheck = self._loop.call_later(seconds, self._watch)

    def _watch(self) -> None:
        self._recheck = None
        if self._closed:
            return
        if not select.select([self._sock], [], [], 0)[0]:
            self._held_since = None  # another process took what waited
        self._loop.add_reader(self._sock.fileno(), self._readable)

    async def _set_up(self, conn: socket.socket) -> None:
        released = False

        def release() -> None:  # once, whichever of the two ends comes first
            nonlocal released
            if not released:
                released = True
                self._gate.closed()
        try:
            await self._loop.connect_accepted_socket(lambda: self._counted(release), conn,
                                                     **self._options)
        except BaseException as exc:  # a failed TLS handshake, a cancelled start
            release()
            conn.close()
            if not isinstance(exc, (asyncio.CancelledError, OSError)):
                log.warning("setting up a connection failed: %s", exc)

    def _counted(self, release: Callable[[], None]) -> asyncio.BaseProtocol:
        """The connection's protocol, whose `connection_lost` also `release`s its count."""
        protocol = self._factory()
        lost = protocol.connection_lost

        def connection_lost(exc: Exception | None) -> None:
            release()
            lost(exc)
        protocol.connection_lost = connection_lost  # type: ignore[method-assign]
        return protocol

    def close(self) -> None:
        """Stop accepting (connections already made go on) and close the socket."""
        if self._closed:
            return
        self._closed = True
        if self._recheck is not None:
            self._recheck.cancel()
        else:
            self._loop.remove_reader(self._sock.fileno())
        for task in list(self._setups):
            task.cancel()
        self._sock.close()

    async def wait_closed(self) -> None:
        if self._setups:
            await asyncio.wait(list(self._setups))
