"""A worker's reach beyond its own models: the request plane for the others.

`PlaneModels` is the core's `RemoteModels` (pbserve/core/stub_calls/remote.py): a BLS call
from one of this worker's models to a model it does not have goes to the plane, to a
worker that serves it. `RoutingCore` is the worker's InferenceCore for its HTTP and
gRPC: its own models first, any other model the registry knows through the plane.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from pbserve.core.api import ModelHandle
from pbserve.core.manager import ModelManager
from pbserve.core.types import InferRequest, InferResponse
from pbserve.distributed.frontend import PlaneCore
from pbserve.errors import ServerError


class PlaneModels:
    """Models served by other workers, for BLS calls (the backend's RemoteModels)."""

    def __init__(self, plane: PlaneCore) -> None:
        self._plane = plane

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return self._plane.is_decoupled(name, version)

    async def model_ready(self, name: str, version: str = "") -> bool:
        return await self._plane.model_ready(name, version)

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return self._plane.model_config(name, version)

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self._plane.infer(request)

    def stream_infer(self, request: InferRequest) -> "PlaneStream":
        return PlaneStream(self._plane, request)


class PlaneStream:
    """One streamed call on the plane; `ask_to_cancel` reaches the remote model."""

    def __init__(self, plane: PlaneCore, request: InferRequest) -> None:
        self._plane = plane
        self._inbox = ""
        self._asked = False
        self._tasks: set[asyncio.Task] = set()
        self._responses = plane.stream_infer(request, on_inbox=self._sent)

    def _sent(self, inbox: str) -> None:
        self._inbox = inbox
        if self._asked:
            self._send_cancel()

    def ask_to_cancel(self) -> None:
        if not self._asked:
            self._asked = True
            if self._inbox:
                self._send_cancel()

    def _send_cancel(self) -> None:
        task = asyncio.get_running_loop().create_task(self._plane.ask_to_cancel(self._inbox))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def __aiter__(self) -> "PlaneStream":
        return self

    async def __anext__(self) -> InferResponse:
        return await self._responses.__anext__()

    async def aclose(self) -> None:
        await self._responses.aclose()  # type: ignore[attr-defined]


class RoutingCore:
    """The worker's own models (its ModelManager), and through the plane every model it
    does not have; everything else is the manager's."""

    def __init__(self, manager: ModelManager, plane: PlaneCore) -> None:
        self._manager = manager
        self._plane = plane

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)

    def _remote(self, name: str, version: str) -> bool:
        """Not loaded here, but served by another worker."""
        try:
            self._manager.model(name, version)
        except ServerError:
            return self._plane._serves(name, version)
        return False

    async def model_ready(self, name: str, version: str = "") -> bool:
        if self._remote(name, version):
            return await self._plane.model_ready(name, version)
        return await self._manager.model_ready(name, version)

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        core = self._plane if self._remote(name, version) else self._manager
        return core.model_metadata(name, version)

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        core = self._plane if self._remote(name, version) else self._manager
        return core.model_config(name, version)

    def is_decoupled(self, name: str, version: str = "") -> bool:
        core = self._plane if self._remote(name, version) else self._manager
        return core.is_decoupled(name, version)

    def model_handle(self, name: str, version: str = "") -> ModelHandle:
        if self._remote(name, version):
            return self._plane.model_handle(name, version)
        return self._manager.model_handle(name, version)

    async def infer(self, request: InferRequest) -> InferResponse:
        if self._remote(request.model_name, request.model_version):
            return await self._plane.infer(request)
        return await self._manager.infer(request)

    def stream_infer(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        if self._remote(request.model_name, request.model_version):
            return self._plane.stream_infer(request)
        return self._manager.stream_infer(request)
