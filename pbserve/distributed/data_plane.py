"""The data plane: large tensors pulled point to point over TCP, never through NATS.

A process that sends a tensor over `inline_max` bytes keeps it (`hold`) and puts a
`Descriptor` in the NATS message instead: its listener's address, an unguessable token
for this one tensor (`secrets`), the size. The process that needs the bytes connects to
that address, sends the token, and reads the bytes once (`pull`); the token is then
used up. What is held is freed after its pull, when its request ends (`HeldGroup.free`),
or when its TTL passes, whichever comes first.

Wire (one pull a connection): the puller sends MAGIC and the 32-byte token; the holder
answers a status byte and an 8-byte little-endian length, then the tensor's bytes
(status OK) or a UTF-8 error message (status ERROR). The holder reads nothing else from a
peer (37 bytes, within HEAD_TIMEOUT_S; MAX_CONNECTIONS at once); the puller reads
exactly the descriptor's size.
Sockets are driven with asyncio's `sock_*` calls: the holder sends straight from the
buffer it holds (a response's shared-memory view: no copy in user space), the puller
receives straight into the buffer it returns (one copy, from the kernel).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import struct
from dataclasses import dataclass
from typing import Callable

from pbserve.core.types import Buffer, TensorData
from pbserve.errors import ErrorCode, ServerError
from pbserve.task_stop import cancel_and_wait

log = logging.getLogger("pbserve.distributed")

MAGIC = b"PBDP1"
TOKEN_BYTES = 32
_REPLY = struct.Struct("<BQ")  # status, length
OK, ERROR = 0, 1
HEAD_TIMEOUT_S = 10.0  # a peer that connects must send its token within this
IDLE_TIMEOUT_S = 30.0  # a pull's reply must begin within this
MIN_RATE = 1 << 20  # bytes/s: a pull slower than this on average (after IDLE_TIMEOUT_S) fails
CONNECT_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 512  # pulls served at once; a peer's connection beyond is closed
MAX_ERROR_BYTES = 4096
UNKNOWN_TOKEN = "data plane: token unknown, already used or expired"


class DataPlaneError(Exception):
    """A pull that failed: the holder refused it, is unreachable, or broke off."""


@dataclass(frozen=True)
class Descriptor:
    """Where a held tensor is and the token that pulls it (once)."""

    address: str  # HOST:PORT of the holder's listener
    token: str  # hex
    nbytes: int


class Remote:
    """The data of a decoded tensor that is still on its holder: `DataPlane.fill`
    replaces it with the pulled bytes."""

    __slots__ = ("descriptor",)

    def __init__(self, descriptor: Descriptor) -> None:
        self.descriptor = descriptor


def split_address(address: str, default_port: int = 0) -> tuple[str, int]:
    """HOST[:PORT] (an IPv6 host in brackets) as (host, port)."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    if address.count(":") == 1:
        host, port = address.split(":")
        return host, int(port)
    return address, default_port


def join_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Held:
    __slots__ = ("view", "group", "expiry")

    def __init__(self, view: memoryview, group: "HeldGroup",
                 expiry: asyncio.TimerHandle) -> None:
        self.view = view
        self.group = group
        self.expiry = expiry


class HeldGroup:
    """The tensors one message sends by descriptor. `on_free` runs once all of them are
    freed (pulled, expired or `free`d) and the group is `close`d: a response's release,
    giving its shared memory back."""

    def __init__(self, plane: "DataPlane", on_free: Callable[[], None] | None) -> None:
        self._plane = plane
        self._on_free = on_free
        self._tokens: set[bytes] = set()
        self._closed = False
        self.inline_max = plane.inline_max
        self.inline_budget = plane.inline_budget

    def hold(self, data: Buffer) -> Descriptor:
        token = self._plane._hold(memoryview(data).cast("B"), self)
        self._tokens.add(token)
        return Descriptor(self._plane.address, token.hex(), memoryview(data).nbytes)

    @property
    def holding(self) -> bool:
        """Whether some of its tensors wait to be pulled."""
        return bool(self._tokens)

    def close(self) -> None:
        """No more holds: `on_free` runs when the last held tensor is freed (now if none)."""
        self._closed = True
        self._maybe_done()

    def free(self) -> None:
        """The request ended: free whatever is still held."""
        for token in list(self._tokens):
            self._plane._drop(token)
        self.close()

    def _freed(self, token: bytes) -> None:
        self._tokens.discard(token)
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self._closed and not self._tokens and self._on_free is not None:
            on_free, self._on_free = self._on_free, None
            on_free()


class DataPlane:
    """This process's listener (holding tensors for peers) and its pulls from peers."""

    def __init__(self, host: str, port: int, inline_max: int, inline_budget: int,
                 ttl_s: float) -> None:
        self._host = host
        self._port = port
        self.inline_max = inline_max
        self.inline_budget = inline_budget  # inline bytes a message may carry in all
        self.ttl_s = ttl_s
        self.address = ""
        self._held: dict[bytes, _Held] = {}
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self._serving: set[asyncio.Task] = set()

    # -- the listener -----------------------------------------------------------------
    async def start(self) -> None:
        sock = socket.create_server((self._host, self._port), reuse_port=False)
        sock.setblocking(False)
        self._sock = sock
        port = sock.getsockname()[1]
        advertised = self._host if self._host not in ("", "0.0.0.0", "::") \
            else socket.gethostname()
        self.address = join_address(advertised, port)
        self._accepting = asyncio.create_task(self._accept(), name="pbserve-data-plane")
        log.info("Started data plane at %s (bound %s)", self.address,
                 join_address(self._host, port))

    async def stop(self) -> None:
        """Stop listening and free everything held (twice is harmless)."""
        await cancel_and_wait(self._accepting)
        await cancel_and_wait(list(self._serving))
        if self._sock is not None:
            self._sock.close()
        for token in list(self._held):
            self._drop(token)

    async def drain(self, timeout_s: float) -> None:
        """Wait (up to `timeout_s`) for what is held to be pulled or to expire."""
        deadline = asyncio.get_running_loop().time() + min(timeout_s, self.ttl_s)
        while self._held and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)

    @property
    def held_count(self) -> int:
        return len(self._held)

    @property
    def held_bytes(self) -> int:
        return sum(h.view.nbytes for h in self._held.values())

    def group(self, on_free: Callable[[], None] | None = None) -> HeldGroup:
        return HeldGroup(self, on_free)

    def _hold(self, view: memoryview, group: HeldGroup) -> bytes:
        token = secrets.token_bytes(TOKEN_BYTES)
        expiry = asyncio.get_running_loop().call_later(self.ttl_s, self._expire, token)
        self._held[token] = _Held(view, group, expiry)
        log.debug("data plane: holding %d bytes (%d held)", view.nbytes, len(self._held))
        return token

    def _take(self, token: bytes) -> _Held | None:
        held = self._held.pop(token, None)
        if held is not None:
            held.expiry.cancel()
        return held

    def _drop(self, token: bytes) -> None:
        held = self._take(token)
        if held is not None:
            self._release(token, held)

    def _release(self, token: bytes, held: _Held) -> None:
        with contextlib.suppress(BufferError):  # a slice still lent out: dropped with it
            held.view.release()
        held.group._freed(token)
        log.debug("data plane: freed %s… (%d held)", token.hex()[:8], len(self._held))

    def _expire(self, token: bytes) -> None:
        if token in self._held:
            log.warning("data plane: a held tensor was not pulled within %g s: freed",
                        self.ttl_s)
            self._drop(token)

    async def _accept(self) -> None:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(self._sock)
            except OSError as err:  # out of descriptors, say: try again soon
                log.warning("data plane: accept failed: %s", err)
                await asyncio.sleep(0.1)
                continue
            if len(self._serving) >= MAX_CONNECTIONS:
                log.warning("data plane: %d pulls in progress: connection from %s closed",
                            len(self._serving), peer)
                conn.close()
                continue
            conn.setblocking(False)
            task = asyncio.create_task(self._serve(conn, peer))
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)

    async def _serve(self, conn: socket.socket, peer) -> None:
        loop = asyncio.get_running_loop()
        with conn:
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                head = bytearray(len(MAGIC) + TOKEN_BYTES)
                await asyncio.wait_for(_recv_into(loop, conn, memoryview(head)),
                                       HEAD_TIMEOUT_S)
                if head[:len(MAGIC)] != MAGIC:
                    await _send_error(loop, conn, "data plane: not a pbserve data-plane "
                                                  "request")
                    return
                token = bytes(head[len(MAGIC):])
                held = self._take(token)
                if held is None:
                    log.warning("data plane: pull from %s refused: %s", peer, UNKNOWN_TOKEN)
                    await _send_error(loop, conn, UNKNOWN_TOKEN)
                    return
                try:
                    await loop.sock_sendall(conn, _REPLY.pack(OK, held.view.nbytes))
                    await loop.sock_sendall(conn, held.view)
                finally:
                    self._release(token, held)
            except (OSError, EOFError, asyncio.TimeoutError) as err:
                log.debug("data plane: connection from %s ended: %s", peer,
                          err or type(err).__name__)

    # -- pulls ------------------------------------------------------------------------
    async def pull(self, descriptor: Descriptor) -> bytearray:
        """The bytes `descriptor` names, read from its holder (DataPlaneError if not)."""
        loop = asyncio.get_running_loop()
        host, port = split_address(descriptor.address)
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            family, kind, proto, _, addr = infos[0]
            sock = socket.socket(family, kind, proto)
        except (OSError, IndexError) as err:
            raise DataPlaneError(f"cannot reach {descriptor.address}: {err}") from None
        with sock:
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, addr), CONNECT_TIMEOUT_S)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_sendall(sock, MAGIC + bytes.fromhex(descriptor.token))
                reply = bytearray(_REPLY.size)
                await _recv_into(loop, sock, memoryview(reply), IDLE_TIMEOUT_S)
                status, length = _REPLY.unpack(reply)
                if status != OK:
                    message = bytearray(min(length, MAX_ERROR_BYTES))
                    await _recv_into(loop, sock, memoryview(message), IDLE_TIMEOUT_S)
                    raise DataPlaneError(message.decode(errors="replace"))
                if length != descriptor.nbytes:
                    raise DataPlaneError(f"{descriptor.address} sent {length} bytes where "
                                         f"{descriptor.nbytes} were described")
                data = bytearray(length)
                # One deadline for the transfer (not one a chunk: cheaper by far).
                await asyncio.wait_for(_recv_into(loop, sock, memoryview(data)),
                                       IDLE_TIMEOUT_S + length / MIN_RATE)
                return data
            except (OSError, EOFError, asyncio.TimeoutError, ValueError) as err:
                raise DataPlaneError(f"pull from {descriptor.address} failed: "
                                     f"{err or type(err).__name__}") from None

    async def fill(self, tensors: list[TensorData], holder: str = "",
                   limit: int = 0) -> None:
        """Pull every tensor whose data is `Remote`, all at once; UNAVAILABLE naming the
        tensor and `holder` (e.g. "worker 'w1'") if one cannot be had; INVALID_ARG,
        pulling nothing, if they come to more than `limit` bytes (0: no limit)."""
        remote = [t for t in tensors if isinstance(t.data, Remote)]
        if not remote:
            return
        total = sum(t.data.descriptor.nbytes for t in remote)  # type: ignore[union-attr]
        if limit and total > limit:
            raise ServerError(ErrorCode.INVALID_ARG,
                              f"request's tensors of {total} bytes exceed the limit of "
                              f"{limit} bytes (--http-max-input-size)")
        pulls = [self.pull(t.data.descriptor) for t in remote]  # type: ignore[union-attr]
        results = await asyncio.gather(*pulls, return_exceptions=True)
        for tensor, result in zip(remote, results):
            if isinstance(result, BaseException):
                if isinstance(result, DataPlaneError):
                    where = f" of {holder}" if holder else ""
                    raise ServerError(ErrorCode.UNAVAILABLE,
                                      f"tensor '{tensor.name}' could not be pulled from "
                                      f"the data plane{where}: {result}")
                raise result
            tensor.data = result


async def _recv_into(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                     view: memoryview, idle_s: float | None = None) -> None:
    """Fill `view` from `sock` (EOFError if the peer closes first)."""
    while view.nbytes:
        if idle_s is None:
            got = await loop.sock_recv_into(sock, view)
        else:
            got = await asyncio.wait_for(loop.sock_recv_into(sock, view), idle_s)
        if not got:
            raise EOFError("connection closed by the peer")
        view = view[got:]


async def _send_error(loop: asyncio.AbstractEventLoop, conn: socket.socket,
                      message: str) -> None:
    data = message.encode()[:MAX_ERROR_BYTES]
    with contextlib.suppress(OSError):
        await loop.sock_sendall(conn, _REPLY.pack(ERROR, len(data)) + data)
