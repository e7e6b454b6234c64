"""GatedServer (server/gated_accept.py): the accept loop frontend processes share a
listening socket with, driven over real sockets."""

from __future__ import annotations

import asyncio
import socket

import pytest

from pbserve.server.gated_accept import GatedServer


class Gate:
    """A gate that allows or not, and counts what it is told."""

    def __init__(self, allow: bool) -> None:
        self.allow = allow
        self.asked = self.opened_n = self.closed_n = 0

    def may_accept(self) -> bool:
        self.asked += 1
        return self.allow

    def opened(self) -> None:
        self.opened_n += 1

    def closed(self) -> None:
        self.closed_n += 1


class Echo(asyncio.Protocol):
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


def listening() -> socket.socket:
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


async def echo_once(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"ping")
    await writer.drain()
    answer = await asyncio.wait_for(reader.readexactly(4), 5)
    writer.close()
    await writer.wait_closed()
    return answer


async def until(predicate, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_each_connection_is_counted_opened_and_then_closed_once():
    sock, gate = listening(), Gate(allow=True)
    server = GatedServer(sock, Echo, gate)
    port = sock.getsockname()[1]
    try:
        for _ in range(3):
            assert await echo_once(port) == b"ping"
        await until(lambda: gate.closed_n == 3)
        assert gate.opened_n == 3
    finally:
        server.close()
        await server.wait_closed()
    assert sock.fileno() == -1 and server.sockets == []


@pytest.mark.asyncio
async def test_a_connection_no_favoured_process_takes_is_taken_anyway():
    """The gate never allows (the frontend it favours is stuck): the connection is still
    served, after the wait, not kept out."""
    sock, gate = listening(), Gate(allow=False)
    server = GatedServer(sock, Echo, gate)
    try:
        assert await echo_once(sock.getsockname()[1]) == b"ping"
        assert gate.asked > 1  # held back and asked again before taking it
        await until(lambda: gate.closed_n == 1)
        assert gate.opened_n == 1
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.asyncio
async def test_a_gate_that_holds_back_asks_again_only_while_a_connection_waits():
    sock, gate = listening(), Gate(allow=False)
    server = GatedServer(sock, Echo, gate)
    try:
        await asyncio.sleep(0.2)
        assert gate.asked == 0  # nothing to accept: not asked, no polling
        assert await echo_once(sock.getsockname()[1]) == b"ping"
        asked = gate.asked
        await asyncio.sleep(0.2)
        assert gate.asked == asked  # the socket is quiet again: no more asking
    finally:
        server.close()
        await server.wait_closed()
