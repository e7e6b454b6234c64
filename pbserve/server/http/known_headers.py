"""The JSON headers of binary infer requests decoded before, and what they decoded to.

A client that sends the same header again (the same inputs and shapes: perf_analyzer, a
serving loop, `tritonclient` called with arrays of one shape) has it decoded with one
dict lookup instead of a JSON parse and the checks of `codec.decode_infer_request`,
about 5 us of the parent's CPU per request. Only plain headers are kept: every input
binary, no input or output in a client's shared memory, no request parameters (the
sequence fields, priority, timeout and custom parameters all decode the full way), and
no request id (ids tend to differ from request to request).
A kept header decodes to exactly what the full decode gives; one whose binary section
has another size than it had decodes the full way, which names the mismatch.
"""

from __future__ import annotations

from typing import NamedTuple

from pbserve.core.types import InferRequest, TensorData
from pbserve.server.http import codec

# Headers longer than this are decoded the full way each time (KServe headers of a few
# inputs are a few hundred bytes).
KEY_MAX_BYTES = 4096
# Headers kept at most; then all are forgotten (a client sending ever new headers costs
# the full decode each time, and bounded memory).
KEPT_MAX = 256


class _Decoded(NamedTuple):
    inputs: tuple[tuple[str, str, tuple[int, ...], int], ...]  # name, type, shape, bytes
    binary_bytes: int  # the binary section's size: the inputs' bytes added up
    requested: tuple[str, ...] | None  # the outputs listed (None: the header lists none)
    plan: codec.OutputPlan


class KnownHeaders:
    """Decodes infer requests with a binary section, remembering plain headers."""

    def __init__(self) -> None:
        self._kept: dict[bytes, _Decoded] = {}

    def decode(self, model: str, version: str, header: memoryview | bytes,
               binary: memoryview) -> tuple[InferRequest, codec.OutputPlan]:
        """`codec.decode_infer_request` of the JSON `header` (not yet parsed)."""
        key = bytes(header) if len(header) <= KEY_MAX_BYTES else None
        known = self._kept.get(key) if key is not None else None
        if known is not None and known.binary_bytes == len(binary):
            request = InferRequest(model_name=model, model_version=version)
            inputs = request.inputs
            offset = 0
            for name, datatype, shape, size in known.inputs:
                end = offset + size
                inputs.append(TensorData(name, datatype, shape, binary[offset:end]))
                offset = end
            if known.requested is not None:
                request.requested_outputs = list(known.requested)
            return request, known.plan
        request, plan = codec.decode_infer_request(
            model, version, codec.parse_json(header, "request"), binary)
        if key is not None:
            decoded = _plain(request, plan, binary)
            if decoded is not None:
                if len(self._kept) >= KEPT_MAX:
                    self._kept.clear()
                self._kept[key] = decoded
        return request, plan


def _plain(request: InferRequest, plan: codec.OutputPlan, binary: memoryview
           ) -> _Decoded | None:
    """What a plain request's header decodes to; None for any other request."""
    if (request.id or request.parameters or request.correlation_id or request.flags
            or request.priority or request.timeout_us or request.uses_shm
            or request.output_shm is not None):
        return None
    inputs = []
    for tensor in request.inputs:
        data = tensor.data
        if type(data) is not memoryview or data.obj is not binary.obj:  # JSON `data`
            return None
        inputs.append((tensor.name, tensor.datatype, tensor.shape, data.nbytes))
    binary_bytes = len(binary)
    if sum([i[3] for i in inputs]) != binary_bytes:
        return None
    requested = None if request.requested_outputs is None \
        else tuple(request.requested_outputs)
    return _Decoded(tuple(inputs), binary_bytes, requested, plan)
