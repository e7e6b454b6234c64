"""The wire encoding of requests and responses on the request plane.

A message is a 4-byte little-endian header length, a JSON header, then every inline
tensor's raw bytes (Triton's layout, as `TensorData.data`) back to back, in the header's
order. Given a `HeldGroup` (data_plane.py), a tensor over its `inline_max` bytes, or one
that would take the message's inline bytes over its `inline_budget`, is held by the
sender and travels as a descriptor (its holder's address and a one-use token) instead:
its decoded `data` is a `Remote` until `DataPlane.fill` pulls it. No pickle: a frame
from another host is data, never code. Decoded inline tensors are memoryviews over the
message's bytes (no copy).
"""

from __future__ import annotations

import json
import struct
from typing import Any

from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.distributed.data_plane import Descriptor, HeldGroup, Remote
from pbserve.errors import ErrorCode, ServerError

_LENGTH = struct.Struct("<I")


def _frame(header: dict[str, Any], tensors: list[TensorData],
           group: HeldGroup | None = None) -> bytes:
    """`group`: where tensors too large to go inline are held (None: all inline)."""
    entries, inline, inline_bytes = [], [], 0
    for t in tensors:
        nbytes = memoryview(t.data).nbytes
        entry: list[Any] = [t.name, t.datatype, list(t.shape), nbytes]
        if group is not None and (nbytes > group.inline_max
                                  or inline_bytes + nbytes > group.inline_budget):
            held = group.hold(t.data)
            entry += [held.address, held.token]
        else:
            inline.append(t.data)
            inline_bytes += nbytes
        entries.append(entry)
    header["tensors"] = entries
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([_LENGTH.pack(len(head)), head, *inline])


def _unframe(data: bytes) -> tuple[dict[str, Any], list[TensorData]]:
    view = memoryview(data)
    (length,) = _LENGTH.unpack_from(view)
    header = json.loads(bytes(view[_LENGTH.size:_LENGTH.size + length]))
    offset = _LENGTH.size + length
    tensors = []
    for name, datatype, shape, nbytes, *remote in header.pop("tensors"):
        if remote:  # [address, token]: on its holder, pulled by DataPlane.fill
            address, token = remote
            tensors.append(TensorData(name, datatype, tuple(shape),
                                      Remote(Descriptor(address, token, nbytes))))  # type: ignore[arg-type]
            continue
        if offset + nbytes > len(view):
            raise ValueError(f"message truncated: tensor '{name}' needs {nbytes} bytes")
        tensors.append(TensorData(name, datatype, tuple(shape), view[offset:offset + nbytes]))
        offset += nbytes
    return header, tensors


def encode_request(request: InferRequest, stream: bool, group: HeldGroup | None = None
                   ) -> bytes:
    """`stream`: the caller reads every response (decoupled), else exactly one.
    `group`: holds the inputs that go by descriptor (see the module's docstring)."""
    return _frame({"model": request.model_name, "version": request.model_version,
                   "id": request.id, "outputs": request.requested_outputs,
                   "parameters": request.parameters,
                   "correlation_id": request.correlation_id, "flags": request.flags,
                   "priority": request.priority, "timeout_us": request.timeout_us,
                   "stream": stream}, request.inputs, group)


def decode_request(data: bytes) -> tuple[InferRequest, bool]:
    header, inputs = _unframe(data)
    request = InferRequest(
        header["model"], header["version"], header["id"], inputs, header["outputs"],
        header["parameters"], header["correlation_id"], header["flags"],
        header["priority"], header["timeout_us"])
    return request, bool(header["stream"])


def encode_response(response: InferResponse, worker: str, group: HeldGroup | None = None
                    ) -> bytes:
    error = response.error
    return _frame({"model": response.model_name, "version": response.model_version,
                   "id": response.id, "parameters": response.parameters,
                   "error": [int(error.code), error.message] if error else None,
                   "final": response.final, "worker": worker}, response.outputs, group)


def encode_error(error: ServerError, model: str, worker: str) -> bytes:
    """A final response carrying only `error` (the request failed before the model)."""
    return encode_response(InferResponse(model, "", error=error), worker)


def encode_accepted(worker: str, instance: str = "") -> bytes:
    """The first message on a request's inbox: `worker` took it (and will answer);
    `instance`: that worker process's token in the registry (registry.py)."""
    return _frame({"accepted": True, "worker": worker, "instance": instance}, [])


def decode_accepted(data: bytes) -> tuple[str, str] | None:
    """(worker, instance) of an accepted message; None for any other message."""
    header, _ = _unframe(data)
    if header.get("accepted"):
        return header["worker"], header.get("instance", "")
    return None


def decode_response(data: bytes) -> tuple[InferResponse | None, str]:
    """The response (None for the accepted message) and the worker that sent it."""
    header, outputs = _unframe(data)
    if header.get("accepted"):
        return None, header["worker"]
    error = header["error"]
    response = InferResponse(
        header["model"], header["version"], header["id"], outputs, header["parameters"],
        ServerError(ErrorCode(error[0]), error[1]) if error else None, header["final"])
    return response, header["worker"]
