"""Measure candidate HTTP stacks for pbserve's KServe v2 frontend.

Each candidate serves one trivial POST handler that does what the real infer path
does at the HTTP level: read the `Inference-Header-Content-Length` header, parse the
JSON request header, slice the binary input out of the body, and answer a JSON
header plus the input bytes as a binary output. The server runs in its own process
(this machine has 2 cores: one for the client, one for the server) and is driven at
concurrency 1 by

* `tritonclient.http` (what users run; its own cost is in the figure), and
* a raw keep-alive socket loop (prebuilt request bytes, minimal response parsing),
  which shows the server's cost with little client noise.

    python bench/http_stack.py [--requests 4000] [--only httptools_uvloop,...]

Prints requests/s and mean microseconds per request; no asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
from proc_cpu import cpu_s

INPUT = np.arange(16, dtype=np.float32)
HEADER_KEY = b"inference-header-content-length"


def answer(header_bytes: bytes, body: memoryview) -> tuple[bytes, memoryview]:
    """The handler under test: parse the KServe header, echo input 0 as output 0."""
    request = json.loads(header_bytes)
    tensor = request["inputs"][0]
    size = tensor["parameters"]["binary_data_size"]
    data = body[:size]
    response = {
        "model_name": "identity", "model_version": "1", "id": request.get("id", ""),
        "outputs": [{"name": "OUTPUT0", "datatype": tensor["datatype"],
                     "shape": tensor["shape"], "parameters": {"binary_data_size": size}}],
    }
    return json.dumps(response, separators=(",", ":")).encode(), data


def split_body(body: bytes | memoryview, header_length: int) -> tuple[bytes, memoryview]:
    view = memoryview(body)
    return bytes(view[:header_length]), view[header_length:]


# --- (a) httptools + asyncio.Protocol ------------------------------------------------

def serve_httptools(port: int, use_uvloop: bool) -> None:
    import httptools

    class Proto(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            self.parser = httptools.HttpRequestParser(self)
            self.headers: dict[bytes, bytes] = {}
            self.chunks: list[bytes] = []

        def data_received(self, data):
            self.parser.feed_data(data)

        def on_message_begin(self):
            self.headers = {}
            self.chunks = []

        def on_header(self, name, value):
            self.headers[name.lower()] = value

        def on_body(self, body):
            self.chunks.append(body)

        def on_message_complete(self):
            body = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
            header_bytes, rest = split_body(body, int(self.headers[HEADER_KEY]))
            head, data = answer(header_bytes, rest)
            status = (b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                      b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                      % (len(head), len(head) + len(data)))
            self.transport.write(b"".join((status, head, data)))

    if use_uvloop:
        import uvloop
        uvloop.install()
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(Proto, "127.0.0.1", port))
    _ = server
    loop.run_forever()


# --- (b) uvicorn + raw ASGI ----------------------------------------------------------

async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    header_length = next(int(v) for k, v in scope["headers"] if k == HEADER_KEY)
    head, data = answer(*split_body(body, header_length))
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"application/octet-stream"),
        (b"inference-header-content-length", str(len(head)).encode()),
        (b"content-length", str(len(head) + len(data)).encode())]})
    await send({"type": "http.response.body", "body": b"".join((head, data))})


def serve_uvicorn(port: int) -> None:
    import uvicorn
    uvicorn.run(asgi_app, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                log_level="warning", access_log=False, lifespan="off")


# --- (c) aiohttp.web -----------------------------------------------------------------

def serve_aiohttp(port: int) -> None:
    from aiohttp import web

    async def handler(request: web.Request) -> web.Response:
        body = await request.read()
        head, data = answer(*split_body(body, int(request.headers[HEADER_KEY.decode()])))
        return web.Response(body=b"".join((head, data)), headers={
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(head))})

    import uvloop
    uvloop.install()
    app = web.Application()
    app.router.add_post("/v2/models/{model}/infer", handler)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --- (d) pbserve's own frontend, over an echo core -------------------------------------

class EchoCore:
    """The least an InferenceCore can do: input i comes back as output i."""

    def is_decoupled(self, name, version=""):
        return False

    async def infer(self, request):
        from pbserve.core.types import InferResponse, TensorData
        outputs = [TensorData("OUTPUT" + t.name[5:], t.datatype, t.shape, t.data)
                   for t in request.inputs]
        return InferResponse(request.model_name, "1", request.id, outputs)


def serve_pbserve(port: int, use_uvloop: bool = True) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pbserve.server.http import protocol as http_protocol
    from pbserve.server.http.server import start_http_server

    if "BENCH_JOIN_LIMIT" in os.environ:  # --write-modes: join always / never
        http_protocol.JOIN_LIMIT = int(os.environ["BENCH_JOIN_LIMIT"])

    if use_uvloop:
        import uvloop
        uvloop.install()

    async def main() -> None:
        await start_http_server(EchoCore(), "127.0.0.1", port)
        await asyncio.Event().wait()

    asyncio.run(main())


SERVERS = {
    "httptools_uvloop": lambda port: serve_httptools(port, use_uvloop=True),
    "httptools_asyncio": lambda port: serve_httptools(port, use_uvloop=False),
    "uvicorn_asgi": serve_uvicorn,
    "aiohttp_web": serve_aiohttp,
    "pbserve_uvloop": serve_pbserve,
    "pbserve_asyncio": lambda port: serve_pbserve(port, use_uvloop=False),
}


# --- clients -------------------------------------------------------------------------

def tritonclient_loop(port: int, count: int) -> float:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    tensor = httpclient.InferInput("INPUT0", [16], "FP32")
    tensor.set_data_from_numpy(INPUT, binary_data=True)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    for _ in range(200):
        client.infer("identity", [tensor], outputs=outputs)
    start = time.perf_counter()
    for _ in range(count):
        result = client.infer("identity", [tensor], outputs=outputs)
    elapsed = time.perf_counter() - start
    assert np.array_equal(result.as_numpy("OUTPUT0"), INPUT)
    client.close()
    return elapsed


def raw_request(port: int, floats: int = 16) -> bytes:
    data = np.arange(floats, dtype=np.float32).tobytes()
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [floats], "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(data)}}],
                         "outputs": [{"name": "OUTPUT0",
                                      "parameters": {"binary_data": True}}]}).encode()
    body = header + data
    return (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/octet-stream\r\n"
            b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
            % (port, len(header), len(body))) + body


def read_response(sock: socket.socket, buf: bytearray) -> None:
    """Read one response (Content-Length framed) off a keep-alive socket; `buf` holds
    bytes already received past the previous response."""
    while (end := buf.find(b"\r\n\r\n")) < 0:
        buf += sock.recv(65536)
    head = bytes(buf[:end]).lower()
    pos = head.index(b"\r\ncontent-length:") + 17
    stop = head.find(b"\r\n", pos)
    total = end + 4 + int(head[pos:stop if stop > 0 else len(head)])
    if len(buf) < total:
        body = bytearray(total - len(buf))
        view = memoryview(body)
        got = 0
        while got < len(body):
            got += sock.recv_into(view[got:got + 262144])
        buf.clear()
        return
    del buf[:total]


def raw_loop(port: int, count: int, floats: int = 16) -> float:
    request = raw_request(port, floats)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    for _ in range(min(500, count)):
        sock.sendall(request)
        read_response(sock, buf)
    start = time.perf_counter()
    for _ in range(count):
        sock.sendall(request)
        read_response(sock, buf)
    elapsed = time.perf_counter() - start
    sock.close()
    return elapsed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start")


def measure(name: str, count: int, rounds: int) -> tuple[float, float, float]:
    """Best of `rounds` (requests/s) for each client against server `name`, and the
    server's own CPU time per request under the raw loop (robust to a busy machine)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", name, "--port", str(port)])
    try:
        wait_port(port)
        triton = max(count / tritonclient_loop(port, count) for _ in range(rounds))
        cpu_before = cpu_s(server.pid)
        raw = max(count / raw_loop(port, count) for _ in range(rounds))
        cpu = (cpu_s(server.pid) - cpu_before) / (rounds * (count + 500))
    finally:
        server.terminate()
        server.wait()
    return triton, raw, cpu


def write_modes(sizes: list[int], rounds: int) -> None:
    """Reply written as one joined buffer vs. header + output buffers written apart."""
    print("# pbserve_uvloop, raw keep-alive loop; output = input (FP32), best round")
    print(f"{'output bytes':>12} {'join us/req':>12} {'separate us/req':>16} "
          f"{'join CPU':>9} {'separate CPU':>13}")
    for size in sizes:
        floats = max(1, size // 4)
        count = max(20, min(20000, (256 << 20) // max(size, 1)))
        row = []
        for limit in (1 << 62, 0):
            port = free_port()
            env = dict(os.environ, BENCH_JOIN_LIMIT=str(limit))
            server = subprocess.Popen([sys.executable, __file__, "--serve", "pbserve_uvloop",
                                       "--port", str(port)], env=env)
            try:
                wait_port(port)
                cpu_before = cpu_s(server.pid)
                best = min(raw_loop(port, count, floats) for _ in range(rounds)) / count
                cpu = (cpu_s(server.pid) - cpu_before) / (rounds * (count + min(500, count)))
            finally:
                server.terminate()
                server.wait()
            row += [best * 1e6, cpu * 1e6]
        print(f"{floats * 4:>12} {row[0]:>12.1f} {row[2]:>16.1f} {row[1]:>9.1f} {row[3]:>13.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=sorted(SERVERS))
    parser.add_argument("--port", type=int)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(SERVERS))
    parser.add_argument("--write-modes", default="",
                        help="output sizes in bytes (comma-separated): compare joined and "
                             "separate reply writes instead")
    args = parser.parse_args()
    if args.serve:
        SERVERS[args.serve](args.port)
        return
    if args.write_modes:
        write_modes([int(x) for x in args.write_modes.split(",")], args.rounds)
        return
    print(f"# {os.cpu_count()} cpus, {args.requests} requests x {args.rounds} rounds, best round,"
          f" concurrency 1, 16 x FP32 binary in/out")
    print(f"{'stack':<20} {'tritonclient req/s':>19} {'us/req':>8} {'raw req/s':>10} "
          f"{'us/req':>8} {'server CPU us/req':>18}")
    for name in args.only.split(","):
        triton, raw, cpu = measure(name, args.requests, args.rounds)
        print(f"{name:<20} {triton:>19.0f} {1e6 / triton:>8.1f} {raw:>10.0f} "
              f"{1e6 / raw:>8.1f} {cpu * 1e6:>18.1f}")


if __name__ == "__main__":
    main()
