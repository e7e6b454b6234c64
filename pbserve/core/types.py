"""What frontends hand to the backend and get back: requests, responses, raw tensors.

Tensor data is always raw bytes in Triton's layout (little-endian, C order; BYTES
elements each a 4-byte little-endian length then the bytes). Frontends never see
numpy objects built by the backend, nor shm internals: only buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Union

from pbserve.errors import ServerError

Buffer = Union[bytes, bytearray, memoryview]
ParamValue = Union[bool, int, float, str]

# Request flags, as Triton's TRITONSERVER_REQUEST_FLAG_*.
FLAG_SEQUENCE_START = 1
FLAG_SEQUENCE_END = 2


@dataclass
class ShmRef:
    """A tensor in a region the client registered (Triton's shared-memory extension):
    the `shared_memory_region`, `_offset` and `_byte_size` parameters. `token` is set
    when the backend resolves the name: the window's descriptor region (shm/client_region.py)."""

    region: str
    offset: int = 0
    byte_size: int = 0
    token: str = ""


@dataclass
class TensorData:
    """One named tensor: Triton datatype name ("FP32", "BYTES", ...), shape, raw bytes.
    `shm`: the tensor lives in a client's region (an input's data is read from it, an
    output was written into it and is not sent back)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: Buffer
    shm: ShmRef | None = None
    # The data already lives in a block of the parent's shm pool (a frontend gathered
    # it there: memory/input_placer.py PlacedBlock); the request takes it over.
    placed: Any = None


@dataclass
class InferRequest:
    """An inference request as a frontend decoded it."""

    model_name: str
    model_version: str = ""  # "" = the version the model's policy serves (latest)
    id: str = ""
    inputs: list[TensorData] = field(default_factory=list)
    requested_outputs: list[str] | None = None  # None = every output the model makes
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    correlation_id: int | str = 0
    flags: int = 0
    priority: int = 0
    timeout_us: int = 0
    # Outputs to write into client regions (by name), and whether any input or output
    # names a region (the core then resolves them: memory/shared_memory.py).
    output_shm: dict[str, ShmRef] | None = None
    uses_shm: bool = False
    # The caller is a stub that takes GPU outputs as they are, by CUDA IPC (a BLS call
    # whose preferred memory is not the CPU); else a GPU output is copied to the host.
    gpu_outputs: bool = False
    # Releases the regions this request holds; the request's PendingRequest takes it.
    _shm_release: Callable[[], None] | None = field(default=None, repr=False)
    # The trace of the request this one is made for (an ensemble's step): this one's is
    # its child (observability/tracing.py Trace).
    _trace_parent: Any = field(default=None, repr=False)
    # The W3C trace context the client sent (`traceparent`, `tracestate`), if any.
    trace_headers: dict[str, str] | None = field(default=None, repr=False)

    def release_shm(self) -> None:
        release, self._shm_release = self._shm_release, None
        if release is not None:
            release()


@dataclass
class InferResponse:
    """One response. `release()` must be called once its data has been sent: the
    output buffers may be views on shared memory that go back to the pool then."""

    model_name: str
    model_version: str
    id: str = ""
    outputs: list[TensorData] = field(default_factory=list)
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    error: ServerError | None = None
    final: bool = True
    _release: Callable[[], None] | None = field(default=None, repr=False)
    # The outputs' shm descriptors, for handing them on (BLS) without a copy.
    _descs: tuple = field(default=(), repr=False)
    # Its stub answered the frontend process that sent the request itself: this one says
    # only that the request is done (pbserve/frontends/link.py)
    answered: bool = False

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()
