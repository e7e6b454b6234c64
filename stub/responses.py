"""Turning what `execute` returned into response messages, with Triton's rules."""

from __future__ import annotations

from collections.abc import Collection

from backend_utils.error import TritonError
from backend_utils.response import InferenceResponse
from stub.errors import StubError
from stub.memory import StubMemory
from stub.tensors import output_desc, output_into_region, output_nbytes


class ExecuteReturnError(StubError):
    """`execute` returned something Triton refuses; the whole batch fails with it."""


def response_msg(response: InferenceResponse, requested: Collection[str], memory: StubMemory,
                 output_shm: dict | None = None, gpu_outputs: bool = False) -> tuple:
    """(error, outputs, parameters_json); outputs pruned to the `requested` names (all
    when it is empty). `requested` is only searched, so the request's own set will do.
    Outputs named in `output_shm` go straight into the client's regions. GPU outputs
    go by CUDA IPC with `gpu_outputs` (a BLS caller that takes them), else to the host."""
    if not isinstance(response, InferenceResponse):
        raise ExecuteReturnError(
            f"Expected an 'InferenceResponse' object in the execute function return list, "
            f"found type '{type(response)}'.")
    error = response.error()
    if error is not None:
        return ((int(error.code()), error.message()), (), response.parameters())
    if output_shm:
        return _with_client_regions(response, requested, memory, output_shm, gpu_outputs)
    pool, borrowed = memory.pool, memory.borrowed
    gpu = memory.gpu if gpu_outputs else None
    outputs = tuple([output_desc(t, pool, borrowed, gpu) for t in response.output_tensors()
                     if not requested or t.name() in requested])
    return (None, outputs, response.parameters())


def _with_client_regions(response: InferenceResponse, requested: Collection[str],
                         memory: StubMemory, output_shm: dict, gpu_outputs: bool) -> tuple:
    """As Triton's response allocator: an output larger than its region makes the
    response an error (checked for every output before anything is written)."""
    tensors = [t for t in response.output_tensors() if not requested or t.name() in requested]
    for tensor in tensors:
        destination = output_shm.get(tensor.name())
        if destination is not None and output_nbytes(tensor) > destination[2]:
            return ((int(TritonError.INTERNAL), (
                f"shared memory size specified with the request for output "
                f"'{tensor.name()}' ({destination[2]} bytes) should be at least "
                f"{output_nbytes(tensor)} bytes to hold the results")), (),
                response.parameters())
    # The client's regions first: if one cannot be written, no pool block is taken yet.
    written = {t.name(): output_into_region(t, output_shm[t.name()], memory.regions,
                                            memory.gpu)
               for t in tensors if t.name() in output_shm}
    gpu = memory.gpu if gpu_outputs else None
    outputs = tuple([written.get(t.name()) or output_desc(t, memory.pool, memory.borrowed, gpu)
                     for t in tensors])
    return (None, outputs, response.parameters())


def check_returned(returned: object, request_count: int, decoupled: bool,
                   instance_name: str) -> list:
    """Validate `execute`'s return value; the list of responses (or Nones)."""
    if decoupled:
        if returned is not None:
            raise ExecuteReturnError(
                f"Python model '{instance_name}' is using the decoupled mode and the execute "
                "function must return None.")
        return [None] * request_count
    if returned is None:
        return [None] * request_count
    if not isinstance(returned, list):
        raise ExecuteReturnError(
            f"Expected a list in the execute return, found type '{type(returned)}'.")
    if len(returned) != request_count:
        raise ExecuteReturnError(
            f"Number of InferenceResponse objects do not match the number of "
            f"InferenceRequest objects. InferenceRequest(s) size is:{request_count}, "
            f"and InferenceResponse(s) size is:{len(returned)}\n")
    return returned
