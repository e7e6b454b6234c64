"""BLS from inside a stub: `InferenceRequest.exec()` / `async_exec()` through the parent.

Inputs go into the stub's pool (or, when a tensor already lives in shm, e.g. an input
the model received, its descriptor is forwarded as is); the target's outputs come back as
descriptors into the target stub's pool and are viewed here without a copy. Those
output blocks belong to the target stub: they are released (BLS_RELEASE with the
response's token) once every numpy array over them has been garbage-collected, so a
model may keep a BLS output for as long as it likes.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, Callable

import numpy as np

from backend_utils.error import TritonError
from backend_utils.request import InferenceRequest
from backend_utils.response import InferenceResponse
from backend_utils.response_iterator import ResponseIterator
from backend_utils.tensor import Tensor
from shm.tensor import NUMPY_OF_DATATYPE, element_count
from stub import protocol as p
from stub.calls import Calls
from stub.context import CURRENT_KEYS
from stub.memory import StubMemory
from stub.tensors import output_desc


class _Release:
    """Sends BLS_RELEASE for a response once its last output array is gone."""

    def __init__(self, send: Callable[[tuple], None], token: int, count: int) -> None:
        self._send, self._token, self._left = send, token, count
        self._lock = threading.Lock()

    def one_gone(self) -> None:
        with self._lock:
            self._left -= 1
            done = self._left == 0
        if done:
            self._send(p.bls_release(self._token))


class BlsClient:
    """`send`: a message on the up queue; `calls`: calls that wait for the parent."""

    def __init__(self, memory: StubMemory, send: Callable[[tuple], None], calls: Calls
                 ) -> None:
        self._memory = memory
        self._send = send
        self._calls = calls

    # -- requests ---------------------------------------------------------------------
    def _args(self, request: InferenceRequest, decoupled: bool) -> tuple[tuple, list]:
        """The BLS message body, and the blocks of our pool to free after the call."""
        pool = self._memory.pool
        descs, owned = [], []
        for tensor in request.inputs():
            desc = getattr(tensor, "_shm_desc", None)
            if desc is None or desc[0] != tensor.name():
                desc = output_desc(tensor, pool)
                owned.append(desc)
            descs.append(desc)
        version = request.model_version()
        args = (request.model_name(), "" if version in (-1, None) else str(version),
                request.request_id(), request.correlation_id(), request.flags(),
                request.parameters(), request.timeout(),
                tuple(request.requested_output_names()), tuple(descs), decoupled,
                CURRENT_KEYS.get(), request._trace._key if request._trace is not None else None)
        return args, owned

    def _free(self, owned: list) -> None:
        for desc in owned:
            self._memory.pool.free(desc[3], desc[4])

    def exec(self, request: InferenceRequest, decoupled: bool) -> Any:
        args, owned = self._args(request, decoupled)
        if decoupled:
            return self._stream(args, owned)
        try:
            reply = self._calls.call("bls", *args)
        finally:
            self._free(owned)
        return self.response(reply)

    async def async_exec(self, request: InferenceRequest, decoupled: bool) -> Any:
        """Waits on the event loop, not in a thread: many calls can be in flight. A stream
        is handed over once its first response is in (as Triton's), so that a caller
        reading it with a blocking `for` lets the loop start other calls until then."""
        args, owned = self._args(request, decoupled)
        if decoupled:
            iterator = self._stream(args, owned)
            try:
                await iterator._first_response()
            except asyncio.CancelledError:
                iterator.cancel()  # nobody will read it: ask the callee to stop
                raise
            return iterator
        try:
            reply = await self._calls.call_async("bls", *args)
        except Exception as exc:  # noqa: BLE001 - BLS errors are responses, as in Triton
            return _error_response(str(exc))
        finally:
            self._free(owned)
        return self.response(reply)

    def _stream(self, args: tuple, owned: list) -> ResponseIterator:
        call_id_box: list[int] = []
        iterator = ResponseIterator(
            cancel=lambda: call_id_box and self._send(p.call_cancel(call_id_box[0])))

        def on_item(value: Any, final: bool) -> None:
            if final:
                self._free(owned)
            iterator._put(self.response(value) if value is not None else None, final)

        call_id_box.append(self._calls.stream("bls", args, on_item))
        return iterator

    # -- responses --------------------------------------------------------------------
    def response(self, reply: tuple) -> InferenceResponse:
        """An InferenceResponse over the target's shm (no copy)."""
        (error, outputs, params), token = reply
        if error is not None:
            return InferenceResponse._incoming(
                output_tensors=[], error=TritonError(error[1], error[0]),
                parameters_json=params)
        tensors = []
        release = _Release(self._send, token, len(outputs)) if token else None
        for name, datatype, shape, region, offset, nbytes in outputs:
            view = self._memory.regions.view(region, offset, nbytes)
            if datatype == "BYTES" or datatype not in NUMPY_OF_DATATYPE:
                tensor = Tensor._from_triton(name, datatype, shape, view)
                if release is not None:
                    release.one_gone()  # parsed into Python objects: the block is free
            else:
                base = np.frombuffer(view, NUMPY_OF_DATATYPE[datatype], element_count(shape))
                tensor = Tensor._from_numpy_view(name, base.reshape(shape), datatype)
                if release is not None:
                    weakref.finalize(base, release.one_gone)
                    self._memory.borrowed.register(base, region, offset, nbytes)
            tensors.append(tensor)
        return InferenceResponse._incoming(output_tensors=tensors, parameters_json=params)


def _error_response(message: str) -> InferenceResponse:
    return InferenceResponse._incoming(output_tensors=[], error=TritonError(message))

