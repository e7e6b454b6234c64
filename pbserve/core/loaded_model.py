"""A model resolved once for one request: the manager's `api.ModelHandle`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from pbserve.core.ensemble.model import EnsembleModel
from pbserve.core.model import Model
from pbserve.core.memory.shared_memory import SharedMemoryManager
from pbserve.core.observability.tracing import TRACER
from pbserve.core.output_labels import output_labels
from pbserve.core.types import InferRequest, InferResponse
from pbserve.errors import ErrorCode, ServerError


class LoadedModel:
    """A loaded model (or ensemble) resolved for one request (api.ModelHandle): the
    client shared-memory regions a request names are resolved and held around it."""

    __slots__ = ("_model", "_shm", "decoupled")

    def __init__(self, model: Model | EnsembleModel, shm: SharedMemoryManager) -> None:
        self._model = model
        self._shm = shm
        self.decoupled = model.decoupled

    def expect(self) -> None:
        self._model.expect_request()

    @property
    def batched(self) -> bool:
        return self._model.cfg.max_batch_size > 0

    def direct_route(self, slot: int) -> tuple | None:
        """Model.direct_route, EnsembleModel.direct_route."""
        return self._model.direct_route(slot)

    def add_direct_stats(self, *figures: int) -> None:
        """Model.add_direct_stats, EnsembleModel.add_direct_stats."""
        self._model.add_direct_stats(*figures)

    def add_direct_responses(self, figures: dict) -> None:
        """Model.add_direct_responses."""
        model = self._model
        if isinstance(model, Model):
            model.add_direct_responses(figures)

    def cancel_direct(self, instance_name: str, key: int) -> None:
        """Model.cancel_direct."""
        model = self._model
        if isinstance(model, Model):
            model.cancel_direct(instance_name, key)

    async def stub_ended(self, instance_name: str, pid: int) -> None:
        """Model.stub_ended."""
        model = self._model
        if isinstance(model, Model):
            await model.stub_ended(instance_name, pid)

    def output_labels(self, output: str) -> list[bytes] | None:
        return output_labels(self._model, output)

    async def infer(self, request: InferRequest, descs: tuple | None = None
                    ) -> InferResponse:
        """`descs`: where the inputs lie in shm already (a frontend process's pool:
        pbserve/frontends/), to be passed on; not for a request that names a client
        region or a model that may answer from its response cache (then the inputs are
        copied as any request's)."""
        if not request.uses_shm:
            if descs is not None and self._model.stats.cache_enabled:
                descs = None
            return await self._model.infer(request, descs)
        self._shm.resolve(request)
        try:
            return await self._model.infer(request)
        finally:
            request.release_shm()  # a no-op once the request was queued: it holds them

    def infer_now(self, request: InferRequest, descs: tuple | None,
                  answer: Callable[[InferResponse], None], key: int = 0
                  ) -> Callable[[], None] | None:
        """`infer` without a coroutine (Model.infer_now: queued now, `answer` called
        with the response in the pass that reads it), for a frontend process's request
        (pbserve/frontends/link.py); the way to cancel it. None, and nothing done, where
        only `infer` serves the request: an ensemble, a trace, the response cache, a
        client region. Raises what validation raises. `key`: Model.infer_now's."""
        model = self._model
        if not isinstance(model, Model) or request.uses_shm or TRACER.enabled \
                or model.stats.cache_enabled:
            return None
        pending = model.infer_now(request, descs, lambda _pending, response: answer(response),
                                  key)
        return lambda: model.cancel(pending)

    def queue_made(self, request: InferRequest, msg: tuple, batch_size: int,
                   answer: Callable[[InferResponse], None]) -> Callable[[], None]:
        """A frontend process's request for a model whose stub answers that frontend
        (Model.direct_route's `scheduled`), validated there and its stub's message
        made there (frontends/direct.py `stub_message`): queued now (Model.queue_made),
        `answer` called as infer_now's; the way to cancel it."""
        model = self._model
        if not isinstance(model, Model):
            raise ServerError(ErrorCode.INTERNAL,
                              f"model '{request.model_name}' does not queue made requests")
        pending = model.queue_made(request, msg, batch_size,
                                   lambda _pending, response: answer(response))
        return lambda: model.cancel(pending)

    def stream_infer(self, request: InferRequest, descs: tuple | None = None
                     ) -> AsyncIterator[InferResponse]:
        if not request.uses_shm:
            if descs is not None and self._model.stats.cache_enabled:
                descs = None
            return self._model.stream_infer(request, descs)
        return self._stream_holding_shm(request)

    async def _stream_holding_shm(self, request: InferRequest
                                  ) -> AsyncIterator[InferResponse]:
        self._shm.resolve(request)  # here: released by the finally below
        try:
            async for response in self._model.stream_infer(request):
                yield response
        finally:
            request.release_shm()
