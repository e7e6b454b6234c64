"""What a transport gives pbserve's gRPC frontend, checked with tritonclient:
`python bench/grpc_echo/features.py TRANSPORT` (starts and stops the echo itself).

Each line: a feature and ok / the failure. Checks: an error status with a percent-encoded
grpc-message in trailers; a unary call cancelled by the sync client's deadline and by the
asyncio client reaching the server; a stream cancelled by the client reaching the server;
the asyncio client's unary and stream calls; client keepalive pings every second on an
idle connection; 64 B and 16 MiB round trips.
"""

from __future__ import annotations

import asyncio
import os
import queue
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grpc_echo import echo  # noqa: E402

MODEL = echo.MODEL


def _input(module, n: int = 16, value: float = 1.0):
    tensor = module.InferInput("INPUT0", [n], "FP32")
    tensor.set_data_from_numpy(np.full(n, value, np.float32))
    return tensor


def _events(path: str, want: str, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and want in Path(path).read_text().splitlines():
            return True
        time.sleep(0.05)
    return False


def check_error(url: str, _events_path: str) -> None:
    c = grpcclient.InferenceServerClient(url)
    try:
        c.infer(echo.ERROR_MODEL, [_input(grpcclient)])
    except InferenceServerException as exc:
        assert exc.status() == "StatusCode.INVALID_ARGUMENT", exc.status()
        assert exc.message() == echo.ERROR_MESSAGE, exc.message()
        return
    raise AssertionError("no error")


def check_unary_cancel(url: str, events: str) -> None:
    c = grpcclient.InferenceServerClient(url)
    try:
        c.infer(echo.WAIT_MODEL, [_input(grpcclient)], client_timeout=0.3)
    except InferenceServerException as exc:
        assert "DEADLINE_EXCEEDED" in exc.status(), exc.status()
    assert _events(events, "call cancelled"), "the server never saw the cancellation"


def check_aio_cancel(url: str, events: str) -> None:
    Path(events).write_text("")

    async def run() -> None:
        c = aioclient.InferenceServerClient(url)
        task = asyncio.ensure_future(c.infer(echo.WAIT_MODEL, [_input(aioclient)]))
        await asyncio.sleep(0.3)
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, InferenceServerException):
            pass
        await c.close()

    asyncio.run(run())
    assert _events(events, "call cancelled"), "the server never saw the cancellation"


def check_stream_cancel(url: str, events: str) -> None:
    c = grpcclient.InferenceServerClient(url)
    results: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: results.put(error or result))
    c.async_stream_infer(MODEL, [_input(grpcclient)])
    results.get(timeout=5)
    c.async_stream_infer(echo.WAIT_MODEL, [_input(grpcclient)])
    time.sleep(0.3)
    c.stop_stream(cancel_requests=True)
    assert _events(events, "stream cancelled"), "the server never saw the cancellation"


def check_aio_unary_and_stream(url: str, _events_path: str) -> None:
    async def run() -> None:
        c = aioclient.InferenceServerClient(url)
        r = await c.infer(MODEL, [_input(aioclient, 16, 2.0)])
        assert r.as_numpy("OUTPUT0")[0] == 2.0

        async def requests():
            for k in range(3):
                yield {"model_name": MODEL, "inputs": [_input(aioclient, 4, k)]}
        got = [int(result.as_numpy("OUTPUT0")[0])
               async for result, error in c.stream_infer(requests()) if not error]
        assert got == [0, 1, 2], got
        await c.close()

    asyncio.run(run())


def check_keepalive(url: str, _events_path: str) -> None:
    options = grpcclient.KeepAliveOptions(keepalive_time_ms=1000, keepalive_timeout_ms=1000,
                                          keepalive_permit_without_calls=True,
                                          http2_max_pings_without_data=0)
    c = grpcclient.InferenceServerClient(url, keepalive_options=options)
    c.infer(MODEL, [_input(grpcclient)])
    time.sleep(4)  # idle: only pings
    c.infer(MODEL, [_input(grpcclient)])


def check_sizes(url: str, _events_path: str) -> None:
    c = grpcclient.InferenceServerClient(url)
    for n in (16, 4194304):
        r = c.infer(MODEL, [_input(grpcclient, n, 3.0)])
        assert r.as_numpy("OUTPUT0").shape == (n,)


CHECKS = [check_sizes, check_error, check_unary_cancel, check_aio_cancel, check_stream_cancel,
          check_aio_unary_and_stream, check_keepalive]


def main() -> None:
    transport = sys.argv[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    events = tempfile.mktemp(prefix="echo-events-")
    env = dict(os.environ, ECHO_EVENTS=events)
    log = tempfile.mktemp(prefix=f"echo-{transport}-")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("serve.py")),
                                 transport, str(port)], env=env, stdout=out, stderr=out,
                                start_new_session=True)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        url = f"127.0.0.1:{port}"
        for check in CHECKS:
            try:
                check(url, events)
                verdict = "ok"
            except Exception as exc:  # noqa: BLE001 - report and go on
                verdict = f"FAILED: {type(exc).__name__}: {exc}"
            print(f"{transport:13} {check.__name__[6:]:22} {verdict}", flush=True)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait()
        print(f"{transport:13} (server log: {log})")


if __name__ == "__main__":
    main()
