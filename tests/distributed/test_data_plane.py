"""The data plane: large tensors held by their sender and pulled point to point over TCP.

A real nats-server, a worker serving `identity` and a model-less frontend as processes,
driven with tritonclient HTTP and gRPC; and the listener itself, driven in this process.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pbserve.distributed.data_plane import (
    UNKNOWN_TOKEN, DataPlane, DataPlaneError, Descriptor, split_address)
from pbserve.testing import RunningServer, running_nats
from shm.names import SHM_DIR, owner_of

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not met in {timeout} s: {condition}"
        time.sleep(0.05)


class Plane:
    def __init__(self, nats, repo: Path, logs: Path) -> None:
        args = ["--request-plane", nats.url, "--log-verbose", "1"]
        self.worker = RunningServer([repo], [*args, "--worker-name", "w1"],
                                    logs / "worker.log")
        self.frontend = RunningServer([], args, logs / "frontend.log")

    def stop(self) -> None:
        self.frontend.stop()
        self.worker.stop()


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("data_plane")
    repo = tmp / "repo"
    repo.mkdir()
    shutil.copytree(ROOT / "models/examples/identity", repo / "identity")
    with running_nats(tmp / "nats.log") as nats:
        p = Plane(nats, repo, tmp)
        try:
            p.worker.wait_ready()
            p.frontend.wait_ready()
            client = p.frontend.http_client()
            wait_for(lambda: client.is_model_ready("identity"))
            yield p
        finally:
            worker_pid = p.worker.pid
            p.stop()
    # The worker's shared memory went with it (nothing held past its exit).
    assert [n for n in os.listdir(SHM_DIR) if owner_of(n) == worker_pid] == []


def _held(server: RunningServer) -> int:
    """How many tensors the process holds for peers now, as its last log line says."""
    counts = re.findall(r"data plane: (?:holding \d+ bytes|freed \S+) \((\d+) held\)",
                        server.log_text())
    return int(counts[-1]) if counts else 0


def _holds(server: RunningServer) -> list[int]:
    """The sizes of every tensor the process has held, in order."""
    return [int(n) for n in re.findall(r"data plane: holding (\d+) bytes", server.log_text())]


def _big(nbytes: int) -> np.ndarray:
    return np.frombuffer(secrets.token_bytes(nbytes), np.uint8)


def test_a_64_mib_tensor_goes_through_the_frontend_and_back_over_http(plane):
    data = _big(64 * MIB)
    before_f, before_w = len(_holds(plane.frontend)), len(_holds(plane.worker))
    client = plane.frontend.http_client(network_timeout=120)
    tensor = httpclient.InferInput("INPUT_UINT8", [data.size], "UINT8")
    tensor.set_data_from_numpy(data, binary_data=True)
    out = httpclient.InferRequestedOutput("OUTPUT_UINT8", binary_data=True)
    result = client.infer("identity", [tensor], outputs=[out])
    assert result.as_numpy("OUTPUT_UINT8").tobytes() == data.tobytes()
    # The input was held by the frontend, the output by the worker: one each, pulled.
    assert _holds(plane.frontend)[before_f:] == [64 * MIB]
    assert _holds(plane.worker)[before_w:] == [64 * MIB]
    # Both holders freed them: their held tables are empty again.
    wait_for(lambda: _held(plane.frontend) == 0 and _held(plane.worker) == 0)


def test_a_16_mib_tensor_goes_through_the_frontend_and_back_over_grpc(plane):
    data = _big(16 * MIB)
    client = plane.frontend.grpc_client()
    tensor = grpcclient.InferInput("INPUT_UINT8", [data.size], "UINT8")
    tensor.set_data_from_numpy(data)
    small = grpcclient.InferInput("INPUT_INT32", [16], "INT32")
    small.set_data_from_numpy(np.arange(16, dtype=np.int32))
    before_f, before_w = len(_holds(plane.frontend)), len(_holds(plane.worker))
    result = client.infer("identity", [tensor, small])
    assert result.as_numpy("OUTPUT_UINT8").tobytes() == data.tobytes()
    assert (result.as_numpy("OUTPUT_INT32") == np.arange(16)).all()
    # Only the large tensor went by the data plane; the 64 B one inline, both ways.
    assert _holds(plane.frontend)[before_f:] == [16 * MIB]
    assert _holds(plane.worker)[before_w:] == [16 * MIB]
    wait_for(lambda: _held(plane.frontend) == 0 and _held(plane.worker) == 0)


def test_small_tensors_travel_inline_in_the_nats_message(plane):
    before_f, before_w = len(_holds(plane.frontend)), len(_holds(plane.worker))
    client = plane.frontend.http_client()
    data = np.arange(16, dtype=np.float32)  # 64 B
    tensor = httpclient.InferInput("INPUT_FP32", [16], "FP32")
    tensor.set_data_from_numpy(data)
    assert (client.infer("identity", [tensor]).as_numpy("OUTPUT_FP32") == data).all()
    # Just at the limit (64 KiB) is inline too.
    edge = _big(64 * 1024)
    tensor = httpclient.InferInput("INPUT_UINT8", [edge.size], "UINT8")
    tensor.set_data_from_numpy(edge)
    assert client.infer("identity", [tensor]).as_numpy("OUTPUT_UINT8").tobytes() == \
        edge.tobytes()
    assert len(_holds(plane.frontend)) == before_f
    assert len(_holds(plane.worker)) == before_w


def test_a_workers_listener_refuses_a_wrong_token(plane):
    async def pull() -> None:
        dp = DataPlane("127.0.0.1", 0, 64, 1024, 60)
        await dp.pull(Descriptor(plane.worker.data_plane_address, secrets.token_hex(32), 10))

    with pytest.raises(DataPlaneError, match=re.escape(UNKNOWN_TOKEN)):
        asyncio.run(pull())
    wait_for(lambda: "pull from" in plane.worker.log_text()
             and UNKNOWN_TOKEN in plane.worker.log_text())
    # The model still answers.
    tensor = httpclient.InferInput("INPUT_INT8", [1], "INT8")
    tensor.set_data_from_numpy(np.array([3], np.int8))
    assert plane.frontend.http_client().infer("identity", [tensor]).as_numpy("OUTPUT_INT8") == 3


def test_a_token_pulls_once_a_foreign_request_is_refused_and_the_ttl_frees():
    async def run() -> None:
        holder = DataPlane("127.0.0.1", 0, 64, 1024, ttl_s=0.3)
        puller = DataPlane("127.0.0.1", 0, 64, 1024, ttl_s=60)
        await holder.start()
        freed: list[str] = []
        try:
            group = holder.group(on_free=lambda: freed.append("once"))
            payload = secrets.token_bytes(100_000)
            first, second = group.hold(payload), group.hold(memoryview(payload)[:10])
            group.close()
            assert holder.held_count == 2 and holder.held_bytes == 100_010
            assert bytes(await puller.pull(first)) == payload
            with pytest.raises(DataPlaneError, match=re.escape(UNKNOWN_TOKEN)):
                await puller.pull(first)  # used up
            assert holder.held_count == 1 and not freed
            # Not pulled within the TTL: freed, the group's release runs once.
            await asyncio.sleep(0.6)
            assert holder.held_count == 0 and freed == ["once"]
            with pytest.raises(DataPlaneError, match=re.escape(UNKNOWN_TOKEN)):
                await puller.pull(second)
            # Not the protocol at all: refused with a clear error.
            host, port = split_address(holder.address)
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
            reply = await reader.read()
            writer.close()
            assert b"not a pbserve data-plane request" in reply
            assert reply[:1] == b"\x01"  # the ERROR status, then the message
        finally:
            await holder.stop()

    asyncio.run(run())


def test_a_request_ending_frees_what_it_held():
    async def run() -> None:
        holder = DataPlane("127.0.0.1", 0, 64, 1024, ttl_s=60)
        await holder.start()
        try:
            freed: list[bool] = []
            group = holder.group(on_free=lambda: freed.append(True))
            descriptor = group.hold(b"y" * 1000)
            group.close()
            group.free()  # e.g. the request was cancelled before anybody pulled
            assert holder.held_count == 0 and freed == [True]
            with pytest.raises(DataPlaneError, match=re.escape(UNKNOWN_TOKEN)):
                await holder.pull(descriptor)
        finally:
            await holder.stop()

    asyncio.run(run())


def test_a_worker_pulls_no_more_than_its_input_limit():
    from pbserve.core.types import TensorData
    from pbserve.distributed.data_plane import Remote
    from pbserve.errors import ErrorCode, ServerError

    async def run() -> None:
        holder = DataPlane("127.0.0.1", 0, 64, 1024, ttl_s=60)
        await holder.start()
        try:
            group = holder.group()
            descriptor = group.hold(b"z" * 5000)
            tensor = TensorData("IN", "UINT8", (5000,), Remote(descriptor))  # type: ignore[arg-type]
            with pytest.raises(ServerError) as err:
                await holder.fill([tensor], "the caller", limit=4096)
            assert err.value.code == ErrorCode.INVALID_ARG
            assert "5000 bytes exceed the limit of 4096" in str(err.value)
            assert holder.held_count == 1  # nothing was pulled
            await holder.fill([tensor], "the caller", limit=5000)
            assert bytes(tensor.data) == b"z" * 5000 and holder.held_count == 0
        finally:
            await holder.stop()

    asyncio.run(run())


def test_a_holder_that_is_gone_fails_the_pull_unavailable_naming_it():
    from pbserve.core.types import TensorData
    from pbserve.distributed.data_plane import Remote
    from pbserve.errors import ErrorCode, ServerError
    from pbserve.testing import free_ports

    async def run() -> None:
        puller = DataPlane("127.0.0.1", 0, 64, 1024, ttl_s=60)
        gone = Descriptor(f"127.0.0.1:{free_ports(1)[0]}", secrets.token_hex(32), 100)
        tensor = TensorData("OUTPUT0", "UINT8", (100,), Remote(gone))  # type: ignore[arg-type]
        with pytest.raises(ServerError) as err:
            await puller.fill([tensor], "worker 'w9'")
        assert err.value.code == ErrorCode.UNAVAILABLE
        assert "tensor 'OUTPUT0' could not be pulled from the data plane of worker 'w9'" \
            in str(err.value)

    asyncio.run(run())


def test_a_cancel_frees_the_outputs_a_worker_holds_for_its_caller():
    """A caller that gives up after the final response but before pulling its outputs
    (the frontend publishes a cancel then): the worker frees them, and the shared
    memory they are in, at once rather than when their TTL passes."""
    from types import SimpleNamespace

    from pbserve.core.types import InferResponse, TensorData
    from pbserve.distributed.worker import PlaneWorker

    class Nats:  # what PlaneWorker._send needs of a connection
        max_payload = 1 << 20

        def __init__(self) -> None:
            self.sent: list[str] = []

        async def publish(self, subject: str, payload: bytes) -> None:
            self.sent.append(subject)

    async def run() -> None:
        holder = DataPlane("127.0.0.1", 0, 64, 1024, ttl_s=60)
        await holder.start()
        try:
            worker = PlaneWorker(None, Nats(), None, SimpleNamespace(worker="w1"), 1.0,
                                 holder, 1 << 20)
            released: list[str] = []
            for inbox in ("_INBOX.a", "_INBOX.b"):
                output = TensorData("OUT", "UINT8", (4096,), b"z" * 4096)
                response = InferResponse("m", "1", outputs=[output],
                                         _release=lambda i=inbox: released.append(i))
                await worker._send(inbox, response)
            assert holder.held_count == 2 and released == []
            await worker._on_cancel(SimpleNamespace(data=b"_INBOX.a"))
            assert holder.held_count == 1 and released == ["_INBOX.a"]
            await worker._on_cancel(SimpleNamespace(data=b"_INBOX.a"))  # twice: harmless
            assert holder.held_count == 1 and released == ["_INBOX.a"]
        finally:
            await holder.stop()
        assert released == ["_INBOX.a", "_INBOX.b"]  # the rest with the listener

    asyncio.run(run())
