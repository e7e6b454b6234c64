"""The surface the frontends (HTTP, gRPC) use; the backend implements it.

Every method that names a model raises `ServerError` with Triton's code and meaning:
NOT_FOUND for an unknown model or version, UNAVAILABLE for a model that is known but
not ready, INVALID_ARG for a bad request.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Protocol

from pbserve.core.memory.shared_memory import SharedMemoryManager
from pbserve.core.types import InferRequest, InferResponse


class ModelHandle(Protocol):
    """One model (and version) as a frontend's request sees it, resolved once by
    `InferenceCore.model_handle`: the hint, the transaction policy and the entry points
    need no further lookup by name."""

    @property
    def decoupled(self) -> bool: ...

    def expect(self) -> None:
        """A request for this model is being decoded: an idle instance may get ready for
        it. Never raises."""
        ...

    @property
    def batched(self) -> bool:
        """Its max_batch_size is above 0: the first dimension of its tensors is the
        batch (what Triton's classification extension classifies item by item)."""
        ...

    def output_labels(self, output: str) -> list[bytes] | None:
        """The classification labels of `output` (its config's `label_filename`, one a
        line; an ensemble's output without one: those of the step output it comes from),
        or None; ServerError when the file cannot be read (core/output_labels.py)."""
        ...

    async def infer(self, request: InferRequest, descs: tuple | None = None
                    ) -> InferResponse:
        """As `InferenceCore.infer`, for this model. `descs`: the inputs already lie in
        another process's shm (a frontend process's pool), as these descriptors: a
        handle may pass them on instead of copying (or ignore them: `data` views them)."""
        ...

    def stream_infer(self, request: InferRequest, descs: tuple | None = None
                     ) -> AsyncIterator[InferResponse]:
        """As `InferenceCore.stream_infer`, for this model; `descs` as for `infer`."""
        ...


class InputPlacer(Protocol):
    """Where a frontend gathers a large request's tensors as they arrive (the parent's
    shm pool: memory/input_placer.py), so that they need no copy of their own. On the
    event loop's thread."""

    def place(self, nbytes: int) -> tuple[memoryview, Any] | None:
        """A writable buffer of `nbytes` and its handle, or None (gather in memory)."""

    def drop(self, handle: Any) -> None:
        """Give back a buffer `place` gave that no request took."""


class InferenceCore(Protocol):
    # The regions clients registered (Triton's shared-memory extensions); an infer
    # request naming one (`uses_shm`) has them resolved by the core.
    shared_memory: SharedMemoryManager

    def is_live(self) -> bool: ...

    async def is_ready(self) -> bool:
        """Triton's strict readiness: live, and every model that was asked for loaded
        and ready (its stubs up, its own `is_ready()` true)."""
        ...

    def server_metadata(self) -> dict[str, Any]:
        """{"name": ..., "version": ..., "extensions": [...]}"""
        ...

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Loaded, its stubs up, and its own `is_ready()` (if any) true in every instance."""
        ...

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """KServe v2 model metadata: name, versions, platform "python", inputs, outputs
        (each {"name", "datatype", "shape"}, shapes as ints, -1 for variable dims and
        the batch dimension included when max_batch_size > 0)."""
        ...

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        """The model's (completed) config as Triton prints it as JSON."""
        ...

    def input_placer(self) -> InputPlacer | None:
        """Where a frontend may gather a large request's tensors so that they need no
        copy of their own, or None (not started; a frontend of another process)."""
        ...

    def model_handle(self, name: str, version: str = "") -> ModelHandle:
        """The model serving `name` (and `version`, "" = its policy's latest), resolved
        for one request; NOT_FOUND or UNAVAILABLE as the other methods say."""
        ...

    def is_decoupled(self, name: str, version: str = "") -> bool: ...

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """[{"name", "version", "state", "reason"}] for every model of the repositories."""
        ...

    async def load_model(self, name: str, config: str | None = None,
                         files: dict[str, bytes] | None = None) -> None:
        """(Re)load; `config` is a JSON override of config.pbtxt, `files` maps
        "file:<relative path>" to content, and the model is then loaded from those files
        alone (file_override.py). Raises INVALID_ARG naming the model when the load
        fails; the model then stays in the index as UNAVAILABLE (a request refused before
        loading, such as files without a config, changes nothing)."""
        ...

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...

    async def infer(self, request: InferRequest) -> InferResponse:
        """One response for a non-decoupled model; errors of the model come back as
        `response.error`, errors of the request (validation, unknown model) raise."""
        ...

    def stream_infer(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Every response of a request (decoupled models), the last with `final=True`
        (which may carry no outputs)."""
        ...

    def metrics_text(self) -> str:
        """Prometheus text exposition of Triton's nv_inference_* families (a core that
        must ask other processes, the plane's frontend, returns a coroutine of it)."""
        ...
