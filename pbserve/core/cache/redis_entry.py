"""A response as the `redis` cache stores it: one Redis hash per response, as Triton's
redis_cache stores one (a field set per buffer), with pbserve's own fields: for output i,
`i:name`, `i:datatype`, `i:shape` (comma-separated) and `i:data` (its bytes, BYTES
tensors in Triton's 4-byte-length layout), and `parameters` (JSON). An entry is
read back only if it is whole and each output's bytes fit its datatype and shape: any
writer of the shared Redis could have put it there, so a bad one is a miss, never a
broken response."""

from __future__ import annotations

import json
import math

from pbserve.core.cache.store import ENTRY_OVERHEAD, CachedResponse
from pbserve.core.config.model_config import ELEMENT_SIZE
from pbserve.core.types import InferResponse
from shm.cuda_region import DeviceBytes
from shm.tensor import BytesLayoutError, bytes_elements

_PARAMETER_TYPES = (str, int, float, bool)


class BadEntry(ValueError):
    """A Redis hash that is not a whole pbserve response entry."""


def encode(response: InferResponse) -> dict[str, bytes] | None:
    """The hash fields of a successful `response`; None for one that cannot be kept (an
    output on the GPU, handed to a BLS caller by CUDA IPC: no host bytes here)."""
    if any(isinstance(t.data, DeviceBytes) for t in response.outputs):
        return None
    fields: dict[str, bytes] = {"parameters": json.dumps(response.parameters).encode()}
    for i, tensor in enumerate(response.outputs):
        fields[f"{i}:name"] = tensor.name.encode()
        fields[f"{i}:datatype"] = tensor.datatype.encode()
        fields[f"{i}:shape"] = ",".join(str(d) for d in tensor.shape).encode()
        fields[f"{i}:data"] = bytes(tensor.data)
    return fields


def decode(fields: dict[bytes, bytes]) -> CachedResponse:
    """The entry of a Redis hash's fields (HGETALL); BadEntry naming what is wrong."""
    try:
        parameters = json.loads(fields[b"parameters"])
    except (KeyError, ValueError):
        raise BadEntry("no readable 'parameters' field") from None
    if not isinstance(parameters, dict) or not all(
            isinstance(v, _PARAMETER_TYPES) for v in parameters.values()):
        raise BadEntry("its 'parameters' are not a map of scalars")
    count, extra = divmod(len(fields) - 1, 4)
    if extra:
        raise BadEntry(f"{len(fields)} fields: incomplete")
    outputs = tuple(_output(fields, i) for i in range(count))
    cost = ENTRY_OVERHEAD + sum(len(o[3]) + len(o[0]) for o in outputs)
    return CachedResponse(outputs, parameters, cost)


def _output(fields: dict[bytes, bytes], i: int) -> tuple[str, str, tuple[int, ...], bytes]:
    try:
        name = fields[b"%d:name" % i].decode()
        datatype = fields[b"%d:datatype" % i].decode()
        shape_text = fields[b"%d:shape" % i].decode()
        data = fields[b"%d:data" % i]
    except (KeyError, UnicodeDecodeError):
        raise BadEntry(f"output {i}'s fields are missing or unreadable") from None
    if datatype not in ELEMENT_SIZE:
        raise BadEntry(f"output '{name}': unknown datatype '{datatype}'")
    try:
        shape = tuple(int(d) for d in shape_text.split(",")) if shape_text else ()
    except ValueError:
        raise BadEntry(f"output '{name}': shape '{shape_text}' is not numbers") from None
    if any(d < 0 for d in shape):
        raise BadEntry(f"output '{name}': negative dimension in {shape}")
    count = math.prod(shape)
    size = ELEMENT_SIZE[datatype]
    if size and len(data) != count * size:
        raise BadEntry(f"output '{name}': {len(data)} bytes for {datatype} {list(shape)}")
    if not size and _bytes_items(data) != count:
        raise BadEntry(f"output '{name}': BYTES data does not hold {count} items")
    return name, datatype, shape, data


def _bytes_items(data: bytes) -> int:
    """How many length-prefixed items `data` holds exactly; -1 when it does not parse."""
    try:
        return len(bytes_elements(data))
    except BytesLayoutError:
        return -1
