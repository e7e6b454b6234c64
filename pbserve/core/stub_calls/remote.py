"""BLS calls to models this process does not have: the seam for the layer above.

A process that joins other processes (pbserve.distributed, a worker on the request
plane) hands its ModelManager a `RemoteModels`; a BLS call whose model is not loaded
here then goes there (bls.py), with the same API for the calling model (exec,
async_exec, decoupled streams, cancellation, errors), and so does an ensemble's step
(ensemble/remote_step.py). The core never imports that layer: it only knows this
protocol. Remote responses' outputs arrive as plain bytes; they are copied once into
the parent's pool, where the calling stub reads them.
"""

from __future__ import annotations

from typing import AsyncIterator, Protocol

from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.types import InferRequest, InferResponse, TensorData


class RemoteStream(Protocol):
    """The responses of one streamed remote call, the final one last."""

    def __aiter__(self) -> AsyncIterator[InferResponse]: ...

    async def __anext__(self) -> InferResponse: ...

    async def aclose(self) -> None: ...

    def ask_to_cancel(self) -> None:
        """`ResponseIterator.cancel()`: the remote model sees `is_cancelled()`; the stream
        goes on until its final response."""
        ...


class RemoteModels(Protocol):
    def is_decoupled(self, name: str, version: str = "") -> bool:
        """Whether the remote model is decoupled; ServerError NOT_FOUND when no other
        process serves `name` (and `version`)."""
        ...

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Whether another process serves `name` (and `version`), ready."""
        ...

    def model_config(self, name: str, version: str = "") -> dict:
        """The remote model's config as Triton prints it (an ensemble checks its steps
        against it); ServerError NOT_FOUND when no other process serves it."""
        ...

    async def infer(self, request: InferRequest) -> InferResponse: ...

    def stream_infer(self, request: InferRequest) -> RemoteStream: ...


def in_parent_blocks(response: InferResponse, refs: BlockRefs) -> InferResponse:
    """`response` with its outputs copied into blocks of the parent's pool (descriptors
    for the calling stub); `release()` frees them."""
    if response.error is not None or not response.outputs:
        return response
    blocks, descs, outputs = [], [], []
    try:
        for tensor in response.outputs:
            block = refs.copy_in(tensor.data)
            blocks.append(block)
            descs.append((tensor.name, tensor.datatype, tuple(tensor.shape), block.region,
                          block.offset, block.nbytes))
            outputs.append(TensorData(tensor.name, tensor.datatype, tensor.shape,
                                      refs.view(block)))
    except BaseException:
        for block in blocks:
            refs.drop((block.region, block.offset))
        raise

    def release() -> None:
        for block in blocks:
            refs.drop((block.region, block.offset))
    return InferResponse(response.model_name, response.model_version, response.id,
                         outputs, response.parameters, None, response.final, release,
                         tuple(descs))
