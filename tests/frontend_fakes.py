"""What the frontend tests (test_http_frontend.py, test_grpc_frontend.py) share: the base
of their fake in-process cores, the thread their servers run in, and the check that
every response made was released.

A fake core counts the responses it made and those the frontend released, records the
hints and repository calls it was given, and poisons released outputs as a pool would
reuse them; each test module's subclass names its models and runs them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, ClassVar

import uvloop

from fake_handle import FakeHandle
from fake_placer import FakePlacer
from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.errors import ServerError, invalid_arg, not_found


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
