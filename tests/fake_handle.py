"""The model handle of the tests' fake cores (api.ModelHandle over a core's by-name
methods), so a fake core only needs `model_handle` to return one."""

from __future__ import annotations

from typing import Any, AsyncIterator

from pbserve.core.types import InferRequest, InferResponse


class FakeHandle:
    def __init__(self, core: Any, name: str, version: str) -> None:
        self.decoupled = core.is_decoupled(name, version)  # NOT_FOUND as the core says
        self._core, self._name, self._version = core, name, version

    def expect(self) -> None:
        self._core.expect_request(self._name, self._version)

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self._core.infer(request)

    def stream_infer(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        return self._core.stream_infer(request)
