"""Turning what `execute` returned into response messages, with Triton's rules."""

from __future__ import annotations

from collections.abc import Collection

from backend_utils.response import InferenceResponse
from shm.pool import Pool
from stub.borrowed import BorrowedBlocks
from stub.errors import StubError
from stub.tensors import output_desc


class ExecuteReturnError(StubError):
    """`execute` returned something Triton refuses; the whole batch fails with it."""


def response_msg(response: InferenceResponse, requested: Collection[str], pool: Pool,
                 borrowed: BorrowedBlocks | None = None) -> tuple:
    """(error, outputs, parameters_json); outputs pruned to the `requested` names (all
    when it is empty). `requested` is only searched, so the request's own set will do."""
    if not isinstance(response, InferenceResponse):
        raise ExecuteReturnError(
            f"Expected an 'InferenceResponse' object in the execute function return list, "
            f"found type '{type(response)}'.")
    error = response.error()
    if error is not None:
        return ((int(error.code()), error.message()), (), response.parameters())
    outputs = tuple([output_desc(t, pool, borrowed) for t in response.output_tensors()
                     if not requested or t.name() in requested])
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
