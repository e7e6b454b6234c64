"""BLS from inside a stub: `InferenceRequest.exec()` / `async_exec()` through the parent.

Inputs go into the stub's pool (or, when a tensor already lives in shm, e.g. an input
the model received, its descriptor is forwarded as is); the target's outputs come back as
descriptors into the target stub's pool and are viewed here without a copy. Those
output blocks belong to the target stub: they are released (BLS_RELEASE with the
response's token) once every numpy array over them has been garbage-collected, so a
model may keep a BLS output for as long as it likes.

GPU tensors go by CUDA IPC both ways (stub/gpu_memory.py): a GPU input is copied into
this stub's CUDA pool, and a GPU output is viewed on the device, unless the request's
`preferred_memory` is the CPU (then it is copied to the host here); a CPU output is copied
to the device a `preferred_memory` of the GPU names, as Triton's allocator places it there
(BYTES stay on the host). A target that hands an input back as its output as it is names
this stub's own block: the response views it, and the block stays this stub's until that
view is gone too (`_CallMemory`).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, Callable

import numpy as np

from backend_utils.constants import TRITONSERVER_MEMORY_CPU, TRITONSERVER_MEMORY_GPU
from backend_utils.error import TritonError
from backend_utils.request import InferenceRequest
from backend_utils.response import InferenceResponse
from backend_utils.response_iterator import ResponseIterator
from backend_utils.tensor import Tensor
from shm import cuda_driver
from shm.cuda_region import is_cuda_token
from shm.tensor import NUMPY_OF_DATATYPE, element_count
from stub import protocol as p
from stub.calls import Calls
from stub.context import CURRENT_KEYS
from stub.direct_bls import DirectBls
from stub.memory import StubMemory
from stub.tensors import output_desc


class _Release:
    """Gives a response's outputs back (`give_back`) once its last output array is gone."""

    def __init__(self, give_back: Callable[[], None], count: int) -> None:
        self._give_back, self._left = give_back, count
        self._lock = threading.Lock()

    def one_gone(self) -> None:
        with self._lock:
            self._left -= 1
            done = self._left == 0
        if done:
            self._give_back()


class _CallMemory:
    """What one BLS call holds of this stub's memory: the blocks of its pools the call's
    inputs were copied to, and where its outputs go, as the request's preferred memory
    says (`cpu_outputs`: GPU ones to the host; `gpu_device`: CPU ones to that GPU). Each
    block is freed once the call has its final answer (`call_done`) and no response
    tensor viewing it (`keep`, a target that answered with the input as it was) is left."""

    def __init__(self, memory: StubMemory, descs: list[tuple], cpu_outputs: bool,
                 gpu_device: int | None = None) -> None:
        self._memory = memory
        self.cpu_outputs = cpu_outputs
        self.gpu_device = gpu_device
        self._refs = {(d[3], d[4]): 1 for d in descs}
        self._lock = threading.Lock()

    def keep(self, region: str, offset: int) -> bool:
        """A response views this block: it stays until `drop`; False if not one of ours."""
        with self._lock:
            key = (region, offset)
            if key not in self._refs:
                return False
            self._refs[key] += 1
            return True

    def drop(self, region: str, offset: int) -> None:
        with self._lock:
            key = (region, offset)
            self._refs[key] -= 1
            if self._refs[key]:
                return
            del self._refs[key]
        if is_cuda_token(region):
            self._memory.gpu.free(region, offset)
        else:
            self._memory.pool.free(region, offset)

    def call_done(self) -> None:
        for region, offset in list(self._refs):
            self.drop(region, offset)


class BlsClient:
    """`send`: a message on the up queue; `calls`: calls that wait for the parent;
    `direct`: calls sent to other stubs directly (with frontend processes), else None."""

    def __init__(self, memory: StubMemory, send: Callable[[tuple], None], calls: Calls,
                 direct: DirectBls | None = None) -> None:
        self._memory = memory
        self._send = send
        self._calls = calls
        self.direct = direct

    # -- requests ---------------------------------------------------------------------
    def _args(self, request: InferenceRequest, decoupled: bool) -> tuple[tuple, _CallMemory]:
        """The BLS message body, and the blocks of our pools to free after the call."""
        memory = self._memory
        descs, owned = [], []
        for tensor in request.inputs():
            desc = getattr(tensor, "_shm_desc", None)
            if desc is None or desc[0] != tensor.name():
                desc = output_desc(tensor, memory.pool, gpu=memory.gpu)
                if not is_cuda_token(desc[3]) or memory.gpu.is_own(desc[3]):
                    owned.append(desc)  # else an input of ours, lent on as it came
            descs.append(desc)
        version = request.model_version()
        preferred = request.preferred_memory()
        memory_type = preferred.preferred_memory_type
        args = (request.model_name(), "" if version in (-1, None) else str(version),
                request.request_id(), request.correlation_id(), request.flags(),
                request.parameters(), request.timeout(),
                tuple(request.requested_output_names()), tuple(descs), decoupled,
                CURRENT_KEYS.get(), request._trace._key if request._trace is not None else None,
                memory_type)
        return args, _CallMemory(
            memory, owned, memory_type == TRITONSERVER_MEMORY_CPU,
            preferred.preferred_device_id  # as a CPU-only Triton: no GPU, stays on the host
            if memory_type == TRITONSERVER_MEMORY_GPU and cuda_driver.device_count() else None)

    def exec(self, request: InferenceRequest, decoupled: bool) -> Any:
        args, owned = self._args(request, decoupled)
        if decoupled:
            return self._stream(args, owned)
        try:
            answered = self._direct_exec(args)
            if answered is not None:
                return self._response(*answered, owned)
            return self.response(self._calls.call("bls", *args), owned)
        finally:
            owned.call_done()

    def _direct_exec(self, args: tuple) -> tuple | None:
        """The call sent to the callee's stub itself, where it may be (DirectBls):
        (its ResponseMsg, what gives its outputs back); None: through the parent."""
        direct = self.direct
        if direct is None:
            return None
        name, version, request_id, correlation_id, flags, parameters, timeout, requested, \
            descs, _, on_behalf_of, trace, memory_type = args
        if timeout or trace is not None or not direct.on_main_thread():
            return None
        return direct.exec(name, version, request_id, correlation_id, flags, parameters,
                           requested, descs, on_behalf_of,
                           memory_type != TRITONSERVER_MEMORY_CPU)

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
            return self.response(reply, owned)
        except Exception as exc:  # noqa: BLE001 - BLS errors are responses, as in Triton
            return _error_response(str(exc))
        finally:
            owned.call_done()

    def _stream(self, args: tuple, owned: _CallMemory) -> ResponseIterator:
        call_id_box: list[int] = []
        iterator = ResponseIterator(
            cancel=lambda: call_id_box and self._send(p.call_cancel(call_id_box[0])))

        def on_item(value: Any, final: bool) -> None:
            try:
                iterator._put(self.response(value, owned) if value is not None else None,
                              final)
            finally:
                if final:
                    owned.call_done()

        call_id_box.append(self._calls.stream("bls", args, on_item))
        return iterator

    # -- responses --------------------------------------------------------------------
    def response(self, reply: tuple, sent: _CallMemory | None = None) -> InferenceResponse:
        """An InferenceResponse over the target's shm (no copy), of the parent's answer
        (its outputs held under its token until BLS_RELEASE)."""
        record, token = reply
        give_back = None
        if token:
            def give_back() -> None:
                self._send(p.bls_release(token))
        return self._response(record, give_back, sent)

    def _response(self, record: tuple, give_back: Callable[[], None] | None,
                  sent: _CallMemory | None = None) -> InferenceResponse:
        """An InferenceResponse of a ResponseMsg over the target's shm; `give_back` once
        its last output array is gone."""
        error, outputs, params = record
        if error is not None:
            return InferenceResponse._incoming(
                output_tensors=[], error=TritonError(error[1], error[0]),
                parameters_json=params)
        tensors = []
        release = _Release(give_back, len(outputs)) if give_back is not None else None
        for desc in outputs:
            name, datatype, shape, region, offset, nbytes = desc
            if is_cuda_token(region):
                tensors.append(self._gpu_output(desc, release, sent))
                continue
            view = self._memory.regions.view(region, offset, nbytes)
            if sent is not None and sent.gpu_device is not None and nbytes and \
                    datatype in NUMPY_OF_DATATYPE and datatype != "BYTES":
                tensor = self._memory.gpu.device_copy(name, datatype, shape, view,
                                                      sent.gpu_device)
                if release is not None:
                    release.one_gone()  # copied to the device: the block is free
            elif datatype == "BYTES" or datatype not in NUMPY_OF_DATATYPE:
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

    def _gpu_output(self, desc: tuple, release: _Release | None, sent: _CallMemory | None
                    ) -> Tensor:
        """A GPU output viewed where it is, or copied to the host when the caller asked
        for CPU outputs. The block is released (and one of ours freed) once no tensor
        over it is left."""
        name, datatype, shape, region, offset, nbytes = desc
        gpu = self._memory.gpu
        if sent is not None and sent.cpu_outputs:
            tensor = gpu.host_tensor(name, datatype, shape, region, offset, nbytes)
            if release is not None:
                release.one_gone()
            return tensor
        tensor, owner = gpu.device_tensor(name, datatype, shape, region, offset, nbytes)
        if sent is not None and sent.keep(region, offset):
            weakref.finalize(owner, sent.drop, region, offset)
        if release is not None:
            weakref.finalize(owner, release.one_gone)
        return tensor


def _error_response(message: str) -> InferenceResponse:
    return InferenceResponse._incoming(output_tensors=[], error=TritonError(message))

