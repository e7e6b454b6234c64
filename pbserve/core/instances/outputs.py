"""The responses of one instance's stub: InferResponses that view the stub's output
blocks, and those blocks given back to the stub that made them once the frontends have
written them (with the next EXECUTE, or a RELEASE RELEASE_DELAY_S later).

A response that names a parent block (an input the model answered with, lent back:
memory/block_refs.py) holds a reference to it until the response is released.
"""

from __future__ import annotations

import asyncio
import json

from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.instances.stub_process import StubProcess
from pbserve.core.instances.supervisor import StubSupervisor
from pbserve.core.pending import PendingRequest
from pbserve.core.types import InferResponse, ShmRef, TensorData
from pbserve.errors import ErrorCode, ServerError
from shm.client_region import is_client_token
from shm.cuda_region import is_client_cuda_token
from shm.pool import RegionMap
from stub import protocol as p

RELEASE_DELAY_S = 0.005


class StubOutputs:
    """One instance's responses and the output blocks it owes its stub (`frees`, sent
    with the next EXECUTE or by `flush`). On the event loop only."""

    def __init__(self, model_name: str, model_version: str, regions: RegionMap,
                 refs: BlockRefs | None, supervisor: StubSupervisor) -> None:
        self.model_name = model_name
        self.model_version = model_version
        self.frees: list[tuple[str, int]] = []  # (region, offset) to give back
        self._regions = regions
        self._refs = refs  # the parent's blocks: an output may name one (lent input)
        self._supervisor = supervisor
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()

    def response(self, pending: PendingRequest, msg: tuple, final: bool) -> InferResponse:
        """The InferResponse of a ResponseMsg of `pending`."""
        error, outputs, params = msg
        response = InferResponse(self.model_name, self.model_version, pending.request.id,
                                 final=final)
        if error is not None:
            self.release(outputs, self._supervisor.stub)
            response.error = ServerError(ErrorCode(error[0]), error[1])
            return response
        view = self._regions.view
        response.outputs = [TensorData(name, datatype, shape, view(region, offset, nbytes))
                            for name, datatype, shape, region, offset, nbytes in outputs]
        if params and params != "{}":
            response.parameters = json.loads(params)
        if outputs and pending.request.output_shm:
            outputs = _in_client_regions(response, outputs)
        if outputs:
            stub = self._supervisor.stub
            held = [loc for loc in {(d[3], d[4]) for d in outputs}
                    if self._refs is not None and self._refs.hold(loc)]
            if not held:
                response._release = lambda: self.release(outputs, stub)
            else:  # some outputs are parent blocks (inputs lent back): they stay alive
                refs = self._refs  # until this response is released

                def release() -> None:
                    self.release(outputs, stub)
                    for location in held:
                        refs.drop(location)
                response._release = release
            response._descs = outputs
        return response

    def error_response(self, pending: PendingRequest, error: ServerError) -> InferResponse:
        return InferResponse(self.model_name, self.model_version, pending.request.id,
                             error=error)

    def release(self, outputs: tuple, stub: StubProcess | None) -> None:
        """Give output blocks back to the stub that made them, with the next EXECUTE or
        shortly after; blocks of a stub that has since died went with its regions."""
        if stub is None or stub is not self._supervisor.stub:
            return
        self.frees.extend((desc[3], desc[4]) for desc in outputs)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_later(RELEASE_DELAY_S, self.flush)

    def flush(self) -> None:
        """Send what is owed now (RELEASE on the control queue), if the stub is alive."""
        self._flush_scheduled = False
        stub = self._supervisor.stub
        if self.frees and stub is not None and stub.alive():
            frees = tuple(self.frees)
            self.frees.clear()
            stub.send_control(p.release(frees))


def _in_client_regions(response: InferResponse, outputs: tuple) -> tuple:
    """Mark the outputs the stub wrote into the client's regions (the frontends send no
    data for them); the outputs that are the stub's blocks."""
    for tensor, desc in zip(response.outputs, outputs):
        if _in_client_region(desc[3]):
            tensor.shm = ShmRef("", desc[4], desc[5], desc[3])
    return tuple([d for d in outputs if not _in_client_region(d[3])])


def _in_client_region(region: str) -> bool:
    """A client's region: system shared memory, or CUDA shared memory."""
    return is_client_token(region) or is_client_cuda_token(region)
