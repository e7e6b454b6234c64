"""The channel between a frontend process and the core, both ends in one process over
real shared memory (the core's end on a thread with its own event loop, as it would be
in its own process): a request's inputs stay in the frontend's pool until the core says
no process reads them, calls are answered with the core's errors, and a client that
leaves cancels its request in the core."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, AsyncIterator

import numpy as np
import pytest

from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.errors import ErrorCode, ServerError, not_found
from pbserve.frontends.calls import CoreCalls
from pbserve.frontends.channel import CoreEnd, FrontendEnd
from pbserve.frontends.link import FrontendLink
from pbserve.frontends.linked_core import LinkedCore
from shm.doorbell import Doorbell
from shm import Pool
from shm.pool import RegionMap


class FakeModel:
    """Answers each request with its input doubled, after `started` is set and `go`;
    counts what it was asked and what was cancelled."""

    def __init__(self, core: "FakeCore", decoupled: bool = False) -> None:
        self.core = core
        self.decoupled = decoupled
        self.batched = False

    def expect(self) -> None:
        pass

    def output_labels(self, output: str) -> None:
        return None

    async def infer(self, request: InferRequest, descs: tuple | None = None
                    ) -> InferResponse:
        self.core.seen.append((request, descs))
        self.core.started.set()
        try:
            while not self.core.go.is_set():
                await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            self.core.cancelled += 1
            request.release_shm()
            raise
        data = np.frombuffer(request.inputs[0].data, np.float32) * 2
        request.release_shm()  # as a PendingRequest does when its final response came
        released = []
        return InferResponse(request.model_name, "1", request.id,
                             [TensorData("OUT", "FP32", (data.size,), data.tobytes())],
                             _release=lambda: released.append(1))

    async def stream_infer(self, request: InferRequest, descs: tuple | None = None
                           ) -> AsyncIterator[InferResponse]:
        for index in range(3):
            yield InferResponse(request.model_name, "1", request.id,
                                [TensorData("N", "INT32", (1,),
                                            np.array([index], np.int32).tobytes())],
                                final=False)
        request.release_shm()
        yield InferResponse(request.model_name, "1", request.id, final=True)


class FakeCore:
    def __init__(self) -> None:
        self.seen: list[tuple[InferRequest, Any]] = []
        self.started = threading.Event()
        self.go = threading.Event()
        self.cancelled = 0
        self.models = {"double": FakeModel(self), "count": FakeModel(self, decoupled=True)}

    def model_handle(self, name: str, version: str = "") -> FakeModel:
        if name not in self.models:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        return self.models[name]

    def server_metadata(self) -> dict[str, Any]:
        return {"name": "triton", "version": "x", "extensions": []}

    async def is_ready(self) -> bool:
        return True


@pytest.fixture
async def linked():
    """(the fake core, its link, the frontend's LinkedCore, the frontend's pool)."""
    core = FakeCore()
    channel = CoreEnd.create(Doorbell())  # its fd goes with the test process
    link = FrontendLink("f0", channel, core, RegionMap(), None, CoreCalls(lambda _: None))
    core_loop = asyncio.new_event_loop()
    started = threading.Event()

    def run_core() -> None:
        asyncio.set_event_loop(core_loop)
        core_loop.call_soon(link.start)
        core_loop.call_soon(started.set)
        core_loop.run_forever()
    thread = threading.Thread(target=run_core, daemon=True)
    thread.start()
    assert started.wait(5)
    pool = Pool(channel.prefix + "-p")
    frontend = LinkedCore(FrontendEnd.attach(channel.spec()), pool)
    frontend.start()
    try:
        yield core, link, frontend, pool
    finally:
        frontend.close()
        asyncio.run_coroutine_threadsafe(link.close(), core_loop).result(5)
        core_loop.call_soon_threadsafe(core_loop.stop)
        thread.join(5)
        core_loop.close()
        channel.close()


async def eventually(check, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


def request(model: str = "double") -> InferRequest:
    data = np.arange(4, dtype=np.float32)
    return InferRequest(model, inputs=[TensorData("IN", "FP32", (4,), data.tobytes())],
                        id="r1", parameters={"p": 1})


async def test_a_request_runs_on_inputs_in_the_frontends_pool(linked):
    core, link, frontend, pool = linked
    core.go.set()
    response = await frontend.model_handle("double").infer(request())
    assert np.frombuffer(response.outputs[0].data, np.float32).tolist() == [0, 2, 4, 6]
    seen, descs = core.seen[0]
    assert seen.parameters == {"p": 1} and seen.id == "r1"
    assert descs[0][3].startswith(link.channel.prefix)  # the frontend's block, passed on
    assert pool.live_blocks == 0  # freed with the final response
    response.release()


async def test_a_client_that_leaves_cancels_the_request_and_its_inputs_wait(linked):
    core, link, frontend, pool = linked
    task = asyncio.ensure_future(frontend.infer(request()))
    await eventually(core.started.is_set)
    assert pool.live_blocks == 1  # the core reads it
    task.cancel()
    await eventually(lambda: core.cancelled == 1 and pool.live_blocks == 0)


async def test_a_stream_gives_every_response_then_the_final(linked):
    _, _, frontend, pool = linked
    got = [r async for r in frontend.model_handle("count").stream_infer(request("count"))]
    assert [np.frombuffer(r.outputs[0].data, np.int32)[0] for r in got[:3]] == [0, 1, 2]
    assert got[-1].final and not got[-1].outputs
    assert pool.live_blocks == 0


async def test_errors_before_the_model_are_raised_with_the_cores_words(linked):
    _, _, frontend, pool = linked
    with pytest.raises(ServerError) as info:
        frontend.model_handle("missing")
    assert info.value.code is ErrorCode.NOT_FOUND
    assert "unknown model: 'missing'" in info.value.message
    with pytest.raises(ServerError) as info:
        await frontend.infer(request("missing"))
    assert info.value.code is ErrorCode.NOT_FOUND
    assert pool.live_blocks == 0


async def test_plain_and_awaited_calls_are_answered(linked):
    _, _, frontend, _ = linked
    assert frontend.server_metadata()["name"] == "triton"
    assert await frontend.is_ready() is True
    assert frontend.model_handle("count").decoupled is True
