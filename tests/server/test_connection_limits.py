"""HTTP connection timeouts and the connection cap, against a real pbserve over raw
sockets: a head or body that stops arriving gets 408, an idle connection is closed, and
past the cap idle connections make room (or a new one is refused) while clients are
still served."""

from __future__ import annotations

import contextlib
import re
import resource
import select
import socket
import time
from pathlib import Path

import pytest

from pbserve.testing import running_server
from polling import wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"
TIMEOUT = 1.0  # every timeout of the `timed` server, in seconds
NO_MODELS = ["--model-control-mode", "explicit"]
LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def timed():
    with running_server(EXAMPLES, args=[
            *NO_MODELS, "--http-header-timeout-secs", str(TIMEOUT),
            "--http-body-timeout-secs", str(TIMEOUT),
            "--http-keepalive-timeout-secs", str(TIMEOUT)]) as srv:
        yield srv


def connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.http_port), timeout=10)


def until_closed(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
    return received


def one_reply(sock: socket.socket) -> bytes:
    """One reply with an empty body (health), read off a kept-alive connection."""
    received = b""
    while not received.endswith(b"\r\n\r\n"):
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {received!r}"
        received += chunk
    return received


def is_open(sock: socket.socket, wait_s: float = 0.3) -> bool:
    """No EOF (nor anything else) arrives within `wait_s`."""
    readable, _, _ = select.select([sock], [], [], wait_s)
    return not readable


def live(server) -> bool:
    with connect(server) as sock:
        sock.sendall(LIVE)
        return one_reply(sock).startswith(b"HTTP/1.1 200")


def trickle(sock: socket.socket, data: bytes, duration_s: float) -> None:
    """Send `data` a byte at a time, spread over `duration_s`."""
    for byte in data:
        sock.sendall(bytes([byte]))
        time.sleep(duration_s / len(data))


# --- timeouts ------------------------------------------------------------------------------

def test_a_half_sent_head_gets_408_and_is_closed(timed):
    with connect(timed) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Part")
        reply = until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 408"), reply
    assert b"request head not received within 1 s" in reply
    assert live(timed)


def test_a_head_trickled_slower_than_the_header_timeout_is_cut_off(timed):
    """The header timeout bounds the whole head: bytes that keep coming do not extend it."""
    with connect(timed) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            trickle(sock, b"GET /v2/health/live HTTP/1.1\r\nX-Slow: " + b"a" * 30,
                    2.5 * TIMEOUT)
        reply = until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 408"), reply


def test_a_stalled_body_gets_408_and_is_closed(timed):
    with connect(timed) as sock:
        sock.sendall(b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 100\r\n\r\n{\"ready\"")
        reply = until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 408"), reply
    assert b"no request body data received for 1 s" in reply
    assert live(timed)


def test_a_slow_body_that_keeps_coming_is_read_to_the_end(timed):
    """The body timeout is a pause between reads, not a bound on the whole body."""
    body = b'{"ready": false}' + b" " * 14
    with connect(timed) as sock:
        sock.sendall(b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        trickle(sock, body, 2.5 * TIMEOUT)
        reply = until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 200"), reply


def test_an_idle_keep_alive_connection_is_closed_without_a_word(timed):
    with connect(timed) as sock:
        sock.sendall(LIVE)
        assert one_reply(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(LIVE)  # kept alive: a second request on it is served
        assert one_reply(sock).startswith(b"HTTP/1.1 200")
        assert until_closed(sock) == b""


def test_a_connection_that_never_sends_is_closed(timed):
    with connect(timed) as sock:
        assert until_closed(sock) == b""


# --- the connection cap ---------------------------------------------------------------

CAP = 8


@pytest.fixture(scope="module")
def capped():
    with running_server(EXAMPLES, args=[*NO_MODELS, "--http-max-connections", str(CAP),
                                        "--http-keepalive-timeout-secs", "60"]) as srv:
        yield srv


def test_past_the_cap_the_longest_idle_connection_makes_room(capped):
    idle = []
    try:
        for _ in range(CAP):
            idle.append(connect(capped))
            time.sleep(0.02)  # one after the other: the first is idle the longest
        wait_for(lambda: is_open(idle[-1], 0.05), "the last idle connection")
        assert live(capped)  # one more connection than the cap: served
        assert until_closed(idle[0]) == b""
        assert all(is_open(sock) for sock in idle[1:])
    finally:
        for sock in idle:
            sock.close()


def test_past_the_cap_with_every_connection_busy_a_new_one_gets_503(capped):
    busy = []
    try:
        for _ in range(CAP):
            sock = connect(capped)
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nX-Part")  # a head in progress
            busy.append(sock)
        time.sleep(0.2)  # every head has been read up to where it stops
        with connect(capped) as extra:
            reply = until_closed(extra)
        assert reply.startswith(b"HTTP/1.1 503"), reply
        assert b"--http-max-connections" in reply
        assert all(is_open(sock, 0.05) for sock in busy)
    finally:
        for sock in busy:
            sock.close()
    wait_for(lambda: live(capped), "the server to serve again")


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def test_more_idle_sockets_than_the_fd_limit_allows_lock_no_client_out():
    """The cap derived from the server's RLIMIT_NOFILE stays below it: a crowd of idle
    connections larger than the limit never makes the server fail to accept."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fd_limit = 256
    # the server's limit only (prlimit runs it so): the test process keeps its own, which
    # the clients of the tests before it may have taken much of
    server = running_server(EXAMPLES, args=[*NO_MODELS, "--http-keepalive-timeout-secs",
                                            "60"],
                            launcher=["prlimit", f"--nofile={fd_limit}:{hard}", "--"])
    srv = server.__enter__()
    limits = Path(f"/proc/{srv.pid}/limits").read_text()
    assert re.search(rf"Max open files\s+{fd_limit}\s", limits), limits
    crowd = []
    try:
        for _ in range(int(fd_limit * 1.5)):
            crowd.append(connect(srv))
        assert live(srv)
        assert open_fds(srv.pid) < fd_limit
        assert live(srv)
    finally:
        for sock in crowd:
            sock.close()
        server.__exit__(None, None, None)
