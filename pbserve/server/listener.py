"""An endpoint's listening sockets, bound before any model loads: a port in use stops
start-up at once, in tritonserver's words (`failed to start HTTP service: Unavailable -
Socket '0.0.0.0:8000' already in use`), and no other server can take the port while the
models load.

    listener = Listener.bind("HTTP", "127.0.0.1", 8000)   # BindError
    ...                                                    # the models load
    servers = await listener.serve(factory, ssl=context)   # accepting from here

The sockets listen from the start: a socket only bound does not keep the port from a
server that binds with SO_REUSEADDR (most do). Connections made meanwhile wait in the
kernel's backlog until the server accepts them.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable
from typing import Any

from pbserve.server.gated_accept import AcceptGate, GatedServer

BACKLOG = 1024


class BindError(OSError):
    """An endpoint's address cannot be bound; the message is tritonserver's."""

    def __init__(self, service: str, host: str, port: int, exc: OSError) -> None:
        where = f"Socket '{host}:{port}'"
        if exc.errno == errno.EADDRINUSE:
            reason = f"{where} already in use"
        else:
            reason = f"{where} cannot be bound: {exc.strerror or exc}"
        super().__init__(f"failed to start {service} service: Unavailable - {reason}")


class Servers:
    """The asyncio servers of one endpoint (one per socket: `localhost` may be two
    addresses); what HttpServer and H2GrpcServer use of an asyncio server."""

    def __init__(self, servers: list[asyncio.AbstractServer | GatedServer]) -> None:
        self._servers = servers

    def __len__(self) -> int:
        return len(self._servers)

    def add(self, server: asyncio.AbstractServer | GatedServer) -> None:
        self._servers.append(server)

    @property
    def sockets(self) -> list[Any]:
        return [sock for server in self._servers for sock in server.sockets]

    def close(self) -> None:
        for server in self._servers:
            server.close()

    async def wait_closed(self) -> None:
        for server in self._servers:
            await server.wait_closed()


class Listener:
    """The bound, listening sockets of one endpoint (`service`: "HTTP", "GRPC" or
    "Metrics", as tritonserver names them), until a server takes them."""

    def __init__(self, service: str, host: str, port: int,
                 sockets: list[socket.socket]) -> None:
        self.service, self.host = service, host
        self.port = sockets[0].getsockname()[1] if sockets else port  # port 0: the one bound
        self._sockets = sockets
        self.gate: AcceptGate | None = None  # set where processes share the sockets

    @classmethod
    def bind(cls, service: str, host: str, port: int, backlog: int = BACKLOG) -> Listener:
        """Bind and listen on every address `host` names, as asyncio's create_server
        would; BindError (the sockets bound so far closed) when one cannot be. Frontend
        processes accept on these same sockets, inherited (pbserve/frontends/)."""
        sockets: list[socket.socket] = []
        try:
            infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(backlog)
                sock.setblocking(False)
        except OSError as exc:
            for sock in sockets:
                sock.close()
            raise BindError(service, host, port, exc) from None
        return cls(service, host, port, sockets)

    async def serve(self, factory: Callable[[], asyncio.BaseProtocol],
                    **options: Any) -> Servers:
        """Accept connections on the sockets, each served by `factory()`; `options`:
        create_server's (ssl, ssl_handshake_timeout). With a `gate` (frontend processes
        sharing the sockets), one connection at a time while it allows (gated_accept.py)."""
        loop = asyncio.get_running_loop()
        servers = Servers([])
        sockets, self._sockets = self._sockets, []
        try:
            for sock in sockets:
                if self.gate is not None:
                    servers.add(GatedServer(sock, factory, self.gate, **options))
                    continue
                servers.add(await loop.create_server(factory, sock=sock, backlog=BACKLOG,
                                                     **options))
        except BaseException:
            servers.close()
            for sock in sockets[len(servers):]:
                sock.close()
            raise
        return servers

    def fds(self) -> list[int]:
        """The sockets' descriptors, for processes that accept on them too (frontend
        processes: pbserve/frontends/); the sockets stay this Listener's."""
        return [sock.fileno() for sock in self._sockets]

    def close(self) -> None:
        """Close the sockets no server took (grpcio, which binds by itself, then binds
        the port at once)."""
        for sock in self._sockets:
            sock.close()
        self._sockets = []
