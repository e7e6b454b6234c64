"""GET /v1/models and /v1/models/{model} (the ready models, as OpenAI's `model`
objects), and Triton's model management extension of its frontend, POST
/v1/models/{model}/load and /unload (only with --model-control-mode=explicit).

`created` is when this endpoint first saw the model ready (Triton's: when its frontend
started, or loaded it); `owned_by` is Triton's frontend's, "Triton Inference Server".
The list is the core's, as it is now (Triton's frontend keeps the list it made at
start-up and what its own load and unload changed).

A load or unload that fails answers as Triton's frontend: 400 for the core's INVALID_ARG
(a bad name, a model whose load failed), 500 for any other error. A load of a name the
repositories do not hold is 500 too: Triton's core fails it with INTERNAL ("failed to
poll from model repository"); pbserve's core raises INVALID_ARG with those words, which
its KServe endpoints keep, and this endpoint tells it by them."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

from pbserve.errors import ErrorCode, ServerError
from pbserve.server.http.messages import HttpReply, json_reply
from pbserve.server.openai.endpoint import Endpoint
from pbserve.server.openai.errors import OpenAIError, bad_request

OWNED_BY = "Triton Inference Server"
# The words of Triton's core for a load of a name no repository holds (or two hold),
# which it fails with INTERNAL; pbserve's core raises INVALID_ARG with them.
POLL_FAILURE = "failed to poll from model repository"


class ModelList:
    """The ready models as OpenAI lists them."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._created: dict[str, int] = {}
        self._changing = asyncio.Lock()  # one load or unload at a time, as Triton's

    def names(self) -> list[str]:
        names = []
        for entry in self._endpoint.core.repository_index(ready_only=True):
            name = entry["name"]
            if name not in names:
                names.append(name)
        return names

    def _model(self, name: str) -> dict[str, Any]:
        created = self._created.setdefault(name, int(time.time()))
        return {"id": name, "object": "model", "created": created, "owned_by": OWNED_BY}

    def list(self) -> HttpReply:
        return json_reply({"object": "list", "data": [self._model(n) for n in self.names()]})

    def get(self, name: str) -> HttpReply:
        if name not in self.names():
            raise OpenAIError(404, f"Unknown model: {name}", "model")
        return json_reply(self._model(name))

    async def load(self, name: str) -> HttpReply:
        return await self._one_at_a_time(self._load, name)

    async def _load(self, name: str) -> HttpReply:
        if name in self.names():
            raise bad_request(f"Model '{name}' is already loaded", "model")
        try:
            await self._endpoint.core.load_model(name)
        except ServerError as exc:
            raise OpenAIError(_load_status(exc),
                              f"Failed to load model '{name}': {exc.message}") from None
        self._created[name] = int(time.time())
        return json_reply(self._model(name))

    async def unload(self, name: str) -> HttpReply:
        return await self._one_at_a_time(self._unload, name)

    async def _unload(self, name: str) -> HttpReply:
        if name not in self.names():
            raise bad_request(f"Unknown model: {name}", "model")
        try:
            await self._endpoint.core.unload_model(name)
        except ServerError as exc:
            raise OpenAIError(_status(exc),
                              f"Failed to unload model '{name}': {exc.message}") from None
        self._created.pop(name, None)
        return json_reply({"status": "success", "model": name})

    async def _one_at_a_time(self, change: Callable[[str], Awaitable[HttpReply]],
                             name: str) -> HttpReply:
        """`change(name)` (a load or an unload) in explicit mode only, one at a time."""
        if self._endpoint.options.control_mode != "explicit":
            raise bad_request("Model load/unload requires --model-control-mode=explicit")
        async with self._changing:
            return await change(name)


def _load_status(error: ServerError) -> int:
    """A failed load's status: a poll failure is 500, as Triton's core's INTERNAL."""
    return 500 if POLL_FAILURE in error.message else _status(error)


def _status(error: ServerError) -> int:
    """Triton's frontend: InvalidArgumentError is the client's (400), the rest 500."""
    return 400 if error.code is ErrorCode.INVALID_ARG else 500
