"""--http-max-input-size: a real pbserve refuses bodies and gRPC messages past the bound
before reading them whole, its memory stays bounded, and it serves on afterwards."""

from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from client_inputs import grpc_input, http_input
from pbserve.testing import running_server

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"
LIMIT = 1 << 20  # 1 MiB: small, so that what the server holds stands out
CLAIMED = 200_000_000
MIB = 1 << 20
# How much more the server process may have held at its peak than before: generous
# against allocator noise, far below the 200 MB the requests carry.
GROWTH = 48 * MIB


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("bounds") / "server.log"
    with running_server(EXAMPLES, log_path=log, args=[
            "--model-control-mode", "explicit", "--load-model", "identity",
            "--http-max-input-size", str(LIMIT)]) as srv:
        yield srv


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of a process, in bytes."""
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            figures[key] = int(value.split()[0]) * 1024
    return figures


def assert_serves(server) -> None:
    a = np.arange(8, dtype=np.int32)
    result = server.http_client().infer("identity", [http_input("INPUT_INT32", a)])
    assert (result.as_numpy("OUTPUT_INT32") == a).all()


def read_reply(sock: socket.socket) -> bytes:
    """Everything the server sent until it closed (a reset after its reply is fine)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def push(sock: socket.socket, total: int, chunked: bool) -> int:
    """Send up to `total` body bytes; how many the server took before it stopped reading
    (its socket buffers filled, then it closed)."""
    block = b"x" * MIB
    frame = b"%x\r\n%s\r\n" % (len(block), block) if chunked else block
    sent = 0
    try:
        while sent < total:
            sock.sendall(frame)
            sent += len(block)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass
    return sent


def infer_head(extra: bytes) -> bytes:
    return (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n")


def test_a_declared_body_past_the_limit_is_413_before_any_of_it_is_sent(server):
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(infer_head(b"Content-Length: %d\r\n" % CLAIMED))
        reply = read_reply(sock)  # no body byte sent: the head alone is answered
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"Connection: close" in reply
    assert b"request body of 200000000 bytes exceeds the maximum allowed input size of " \
           b"1048576 bytes. Use --http-max-input-size" in reply
    assert_serves(server)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_200_mb_body_is_not_read_and_server_memory_stays_bounded(server, chunked):
    before = memory(server.pid)
    framing = b"Transfer-Encoding: chunked\r\n" if chunked else b"Content-Length: %d\r\n" % CLAIMED
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(infer_head(framing))
        sent = push(sock, CLAIMED, chunked)
        reply = read_reply(sock)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"--http-max-input-size" in reply
    assert sent < CLAIMED // 4, f"the server read {sent} bytes of a refused body"
    after = memory(server.pid)
    assert after["VmHWM"] - before["VmHWM"] < GROWTH, (before, after)
    assert after["VmRSS"] - before["VmRSS"] < GROWTH, (before, after)
    assert_serves(server)


def padded_infer_body(size: int) -> bytes:
    """An infer request of exactly `size` bytes (JSON allows the trailing spaces)."""
    body = json.dumps({"inputs": [{"name": "INPUT_INT32", "datatype": "INT32",
                                   "shape": [2], "data": [1, 2]}]}).encode()
    return body + b" " * (size - len(body))


@pytest.mark.parametrize("size,status", [(LIMIT, b"200"), (LIMIT + 1, b"413")])
def test_the_limit_is_inclusive(server, size, status):
    body = padded_infer_body(size)
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(infer_head(b"Content-Length: %d\r\nConnection: close\r\n" % len(body))
                     + body)
        reply = read_reply(sock)
    assert reply.startswith(b"HTTP/1.1 " + status), reply[:200]


def test_a_binary_tensor_of_exactly_the_limit_fits_with_its_json_header(server):
    exact = np.arange(LIMIT // 4, dtype=np.int32)
    result = server.http_client().infer("identity", [http_input("INPUT_INT32", exact)])
    assert (result.as_numpy("OUTPUT_INT32") == exact).all()


def test_tritonclient_gets_the_413_message(server):
    big = np.zeros(LIMIT // 4 + 1, np.int32)  # one element past the limit, plus the header
    with pytest.raises(InferenceServerException) as info:
        server.http_client().infer("identity", [http_input("INPUT_INT32", big)])
    assert "exceeds the maximum allowed input size of" in str(info.value)
    assert "Use --http-max-input-size to increase the limit" in str(info.value)
    assert_serves(server)


def test_a_body_that_decompresses_past_the_limit_is_400(server):
    bomb = gzip.compress(padded_infer_body(64 * LIMIT))  # 64 MiB of JSON, ~64 KiB sent
    assert len(bomb) < LIMIT
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(infer_head(b"Content-Length: %d\r\nContent-Encoding: gzip\r\n"
                                b"Connection: close\r\n" % len(bomb)) + bomb)
        reply = read_reply(sock)
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b"Decompressed data size exceeds the maximum allowed value of 1048576" in reply
    assert_serves(server)


def test_a_grpc_message_past_the_limit_is_resource_exhausted(server):
    before = memory(server.pid)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    big = np.zeros(CLAIMED // 4, np.int32)  # 200 MB
    with pytest.raises(InferenceServerException) as info:
        client.infer("identity", [grpc_input("INPUT_INT32", big)])
    assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED", info.value
    small = np.arange(4, dtype=np.int32)
    result = client.infer("identity", [grpc_input("INPUT_INT32", small)])
    assert (result.as_numpy("OUTPUT_INT32") == small).all()
    client.close()
    after = memory(server.pid)
    assert after["VmHWM"] - before["VmHWM"] < GROWTH, (before, after)
