"""The tests' shared fakes, in one module:
- `FakeHandle`: the model handle of the fake cores (api.ModelHandle over a core's
  by-name methods), so a fake core only needs `model_handle` to return one;
- `FakeLoop`: an event loop stand-in whose clock and timers a test moves by hand, and
  `fake_clock`, which puts a batcher on one;
- `FakePlacer`: an InputPlacer (core/api.py) that buffers in process memory, and
  `move_out`, the pressure step both frontends' gatherers are tested under;
- `FakeCore`, `ServerThread`, `assert_all_released`: what the frontend tests share: the
  base of their fake in-process cores (each test module's subclass names its models and
  runs them), the thread their servers run in, the check that every response made was
  released.
"""

from __future__ import annotations

from typing import Any, AsyncIterator
import asyncio
import threading
import time
from typing import ClassVar

import uvloop

from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.errors import ServerError, invalid_arg, not_found


# -- fake handle ------------------------------------------------------------------

class FakeHandle:
    def __init__(self, core: Any, name: str, version: str) -> None:
        self.decoupled = core.is_decoupled(name, version)  # NOT_FOUND as the core says
        self._core, self._name, self._version = core, name, version

    batched = False  # the fake models' tensors have no batch dimension

    def expect(self) -> None:
        self._core.expect_request(self._name, self._version)

    def output_labels(self, output: str) -> None:
        return None

    async def infer(self, request: InferRequest, descs: tuple | None = None
                    ) -> InferResponse:
        return await self._core.infer(request)

    def stream_infer(self, request: InferRequest, descs: tuple | None = None
                     ) -> AsyncIterator[InferResponse]:
        return self._core.stream_infer(request)


# -- fake loop --------------------------------------------------------------------

class FakeLoop:
    """Loop time and timers the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback):
        loop = self

        class Handle:
            def when(self) -> float:
                return when

            def cancel(self) -> None:
                if entry in loop.timers:
                    loop.timers.remove(entry)

        entry = (when, callback, Handle())
        self.timers.append(entry)
        return entry[2]

    def call_later(self, delay: float, callback):
        return self.call_at(self.now + delay, callback)

    def call_soon(self, callback) -> None:
        """At once: the test's turn of the loop ends with each call it makes."""
        callback()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for entry in sorted((t for t in self.timers if t[0] <= self.now), key=lambda t: t[0]):
            if entry in self.timers:
                self.timers.remove(entry)
                entry[1]()


class _FakeTimer:
    """A batcher's PreciseTimer (scheduling/precise_timer.py) on a FakeLoop's clock."""

    def __init__(self, loop: FakeLoop, callback) -> None:
        self._loop, self._callback, self._handle = loop, callback, None

    def now(self) -> float:
        return self._loop.now

    def at(self, when: float) -> None:
        if self._handle is not None and self._handle.when() <= when:
            return
        self.cancel()
        self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._callback()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    close = cancel


def fake_clock(batcher: Any) -> FakeLoop:
    """Put a Scheduler or SequenceBatcher on a FakeLoop: its loop, its clock and its
    timer; the loop."""
    loop = batcher._loop = FakeLoop()
    batcher._timer.close()
    batcher._timer = _FakeTimer(loop, batcher._on_timer)
    return loop


# -- fake placer ------------------------------------------------------------------

class FakePlacer:
    def __init__(self, decline: bool = False) -> None:
        self.decline = decline  # place nothing: the frontend gathers in memory
        self.placed: list[int] = []
        self.dropped: list[object] = []

    def place(self, nbytes: int) -> tuple[memoryview, object] | None:
        if self.decline:
            return None
        self.placed.append(nbytes)
        return memoryview(bytearray(nbytes)), object()

    def drop(self, handle: object) -> None:
        self.dropped.append(handle)


def move_out(pool: Any, placer: Any, request: Any) -> tuple[bytes, bool]:
    """/dev/shm runs short while `request` waits for an instance: its placed inputs move
    out to process memory (InputPlacer.relieve) and the pool gives its empty regions
    back. Its first placed input's bytes after, and whether that input's region was
    unmapped (no view of it left anywhere)."""
    tensor = next(t for t in request.inputs if t.placed is not None)
    region = pool.region(tensor.placed.block.region)
    for t in request.inputs:
        if t.placed is not None:
            t.placed.park(t)  # the request waits for an instance
    assert placer.relieve() > 0
    data = bytes(tensor.data)  # in process memory now
    assert pool.trim(force=True)  # the region is given back...
    return data, region.map.closed  # ...and unmapped, unless a view of it is left


# -- frontend fakes ---------------------------------------------------------------

class FakeCore:
    """The InferenceCore surface both frontends' tests use; a subclass sets `MODELS`
    (`DECOUPLED` among them) and answers metadata and inference."""

    DECOUPLED: ClassVar[frozenset[str]] = frozenset()
    MODELS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        self.made = 0
        self.expected: list[tuple[str, str]] = []  # expect_request hints, in order
        self.released = 0
        self.loads: list[tuple] = []
        self.unloads: list[tuple] = []
        self.unloaded: set[str] = set()
        self.placer = FakePlacer()

    # where the frontend gathers large requests' tensors: memory, counted
    def input_placer(self) -> FakePlacer:
        return self.placer

    # health and metadata
    def is_live(self) -> bool:
        return True

    async def is_ready(self) -> bool:
        return True

    def _check(self, name: str, version: str = "") -> None:
        if name not in self.MODELS or name in self.unloaded:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if version not in ("", "1"):
            raise not_found(f"Request for unknown model: '{name}' version {version} is "
                            "not found")

    async def model_ready(self, name: str, version: str = "") -> bool:
        return name in self.MODELS and name not in self.unloaded and name != "sleepy"

    def model_handle(self, name: str, version: str = "") -> FakeHandle:
        return FakeHandle(self, name, version)

    def expect_request(self, name: str, version: str = "") -> None:
        self.expected.append((name, version))  # the handle's hint

    def is_decoupled(self, name: str, version: str = "") -> bool:
        self._check(name, version)
        return name in self.DECOUPLED

    # repository
    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        entries = [{"name": m, "version": "1",
                    "state": "UNAVAILABLE" if m in self.unloaded else "READY", "reason": ""}
                   for m in sorted(self.MODELS)]
        return [e for e in entries if e["state"] == "READY" or not ready_only]

    async def load_model(self, name: str, config: str | None = None,
                         files: dict[str, bytes] | None = None) -> None:
        self.loads.append((name, config, files))
        if name == "broken":
            raise invalid_arg(f"failed to load '{name}': SyntaxError: invalid syntax")
        self.unloaded.discard(name)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self.unloads.append((name, unload_dependents))
        self.unloaded.add(name)

    # inference
    def _response(self, request: InferRequest, outputs: list[TensorData],
                  error: ServerError | None = None, final: bool = True,
                  parameters: dict | None = None) -> InferResponse:
        self.made += 1
        wanted = request.requested_outputs
        if wanted is not None:
            outputs = [o for o in outputs if o.name in wanted]
        return InferResponse(request.model_name, "1", request.id, outputs,
                             parameters=parameters or {}, error=error, final=final,
                             _release=lambda: self._release(outputs))

    def _release(self, outputs: list[TensorData]) -> None:
        """Poison bytearray outputs, as a pool would reuse them: a reply still being
        sent from them when released would reach the client corrupted."""
        self.released += 1
        for output in outputs:
            if isinstance(output.data, bytearray):
                output.data[:] = b"\xaa" * len(output.data)


class ServerThread:
    """A frontend's servers on their own event loop (uvloop's or asyncio's) in a daemon
    thread: a subclass's `start` starts them on that loop, its `close` closes them."""

    def __init__(self, core: FakeCore, loop: str = "uvloop") -> None:
        self.core = core
        self.loop = uvloop.new_event_loop() if loop == "uvloop" else asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        assert started.wait(10)

    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            await self.start()
            started.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def assert_all_released(core: FakeCore) -> None:
    """Releases run on the server thread just after the reply went out: wait a bit."""
    deadline = time.monotonic() + 2
    while core.released != core.made and time.monotonic() < deadline:
        time.sleep(0.005)
    assert core.released == core.made, "a response was not released"


class LinkedCore:
    """`core` as a frontend process reaches it (pbserve/frontends/): a FrontendLink
    serves it on an event loop thread of its own (the core process's), and `frontend`
    is the LinkedCore a frontend's servers use, over real shm queues and pools. `stop`
    ends both ends and removes the shm."""

    def __init__(self, core: Any) -> None:
        from pbserve.frontends.calls import CoreCalls
        from pbserve.frontends.channel import CoreEnd
        from shm.doorbell import Doorbell
        from pbserve.frontends.link import FrontendLink
        from shm.pool import RegionMap

        from pbserve.core.memory.block_refs import BlockRefs
        from pbserve.core.stub_calls.remote import in_parent_blocks
        from shm import Pool
        from shm.names import new_prefix

        self.channel = CoreEnd.create(Doorbell())  # its fd goes with the test process
        self.pool = Pool(new_prefix() + "-core")  # outputs too large for a message
        refs = BlockRefs(self.pool)
        self.link = FrontendLink("test", self.channel, core, RegionMap(),
                                 lambda response: in_parent_blocks(response, refs),
                                 CoreCalls(lambda _changes: None))
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(self.link.start)
            self.loop.call_soon(started.set)
            self.loop.run_forever()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(10)

    def frontend(self) -> Any:
        """The frontend's end, made on the frontend's loop (call it there)."""
        from pbserve.frontends.channel import FrontendEnd
        from pbserve.frontends.linked_core import LinkedCore as Linked
        from shm import Pool

        self.linked = Linked(FrontendEnd.attach(self.channel.spec()),
                             Pool(self.channel.prefix + "-p"))
        self.linked.start()
        return self.linked

    def stop(self) -> None:
        """After the frontend's servers closed (its end is closed on its loop first)."""
        asyncio.run_coroutine_threadsafe(self.link.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        self.channel.close()
        self.pool.close()
