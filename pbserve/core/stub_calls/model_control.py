"""Model control calls: a model loads, unloads or asks about another model
(pb_utils.load_model, unload_model, is_model_ready), answered by the model manager (its
`ModelRepository` side) and, for readiness, by other processes (`remote`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from pbserve.core.stub_calls.caller import Caller
from pbserve.core.stub_calls.remote import RemoteModels
from pbserve.errors import ErrorCode, ServerError

log = logging.getLogger("pbserve.core")


class ModelRepository(Protocol):
    """What model control asks of the model manager (api.py's InferenceCore)."""

    async def load_model(self, name: str, config: str | None = None,
                         files: dict[str, bytes] | None = None) -> None: ...

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...

    async def model_ready(self, name: str, version: str = "") -> bool: ...


class ModelControl:
    """`repository`: None where model control is not available."""

    def __init__(self, repository: ModelRepository | None) -> None:
        self._repository = repository
        self.remote: RemoteModels | None = None  # other processes' models (remote.py)
        self._background: set[asyncio.Task] = set()

    def answers(self) -> dict[str, Callable[..., object]]:
        """op -> what answers it, called with (caller, *args)."""
        return {"load_model": self._load_model, "unload_model": self._unload_model,
                "is_model_ready": self._is_model_ready}

    def _manager(self) -> ModelRepository:
        if self._repository is None:
            raise ServerError(ErrorCode.UNAVAILABLE, "model control is not available")
        return self._repository

    async def _load_model(self, caller: Caller, name: str, config: str,
                          files: dict[str, bytes] | None) -> None:
        if name == caller.model_name:
            # A reload ends by unloading the old version after its in-flight requests,
            # the one making this call among them: it would wait for itself.
            raise ServerError(ErrorCode.UNSUPPORTED,
                              f"model '{name}' cannot load itself from its own code")
        # Shielded: a caller that goes away must not leave a model half loaded.
        await asyncio.shield(self._manager().load_model(name, config or None, files or None))

    async def _unload_model(self, caller: Caller, name: str,
                            unload_dependents: bool) -> None:
        unload = asyncio.get_running_loop().create_task(
            self._manager().unload_model(name, unload_dependents))
        if name != caller.model_name:
            await asyncio.shield(unload)
            return
        # Unloading itself: as in Triton, the model goes once its running execute is
        # done, so answer now. Errors found before any waiting still reach the model.
        await asyncio.sleep(0)
        if unload.done():
            unload.result()
            return
        self._background.add(unload)
        unload.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("unload requested by a model failed: %s", task.exception())

    async def _is_model_ready(self, caller: Caller, name: str, version: str) -> bool:
        if await self._manager().model_ready(name, version):
            return True
        return self.remote is not None and await self.remote.model_ready(name, version)
