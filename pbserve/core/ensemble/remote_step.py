"""A step whose model another process serves (a worker of the request plane): the
ensemble calls it through the backend's `RemoteModels` seam, as a BLS call would. Its
outputs arrive as bytes and are copied once into the parent's pool, where the next
steps' stubs read them."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.config.model_config import config_from_dict
from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.stub_calls.remote import RemoteModels, in_parent_blocks
from pbserve.core.types import InferRequest, InferResponse


class RemoteStep:
    def __init__(self, remote: RemoteModels, name: str, version: str,
                 refs: BlockRefs) -> None:
        """ServerError NOT_FOUND when no other process serves `name`."""
        self.decoupled = remote.is_decoupled(name, version)
        self._remote = remote
        self._name = name
        self._version = version
        self._refs = refs

    @property
    def cfg(self) -> mc.ModelConfig:
        return config_from_dict(self._remote.model_config(self._name, self._version))

    async def infer(self, request: InferRequest, descs: tuple | None = None
                    ) -> InferResponse:
        return in_parent_blocks(await self._remote.infer(request), self._refs)

    async def stream_infer(self, request: InferRequest, descs: tuple | None = None
                           ) -> AsyncIterator[InferResponse]:
        stream = self._remote.stream_infer(request)
        async with contextlib.aclosing(stream):
            async for response in stream:
                yield in_parent_blocks(response, self._refs)

    async def not_ready_reason(self) -> str | None:
        if await self._remote.model_ready(self._name, self._version):
            return None
        return "no worker serves it ready"

    def expect_request(self) -> None:
        """Nothing to wake here: the model runs in another process."""
