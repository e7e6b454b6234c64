"""Implicit state (`sequence_batching.state`) of the built-in backends: the config's
state tensors, and the value a state input has on a sequence's first request (Triton's
`initial_state`: `zero_data` or `<model>/initial_state/<data_file>`).

Imported in the stub, by common.py and the backends' model.py files; numpy only.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

# config data_type -> numpy dtype (TYPE_STRING: object arrays of bytes)
NUMPY_TYPES = {
    "TYPE_BOOL": np.bool_, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32, "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16, "TYPE_INT32": np.int32, "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
_LENGTH = struct.Struct("<I")  # a BYTES element's length prefix (Triton's wire format)


@dataclass(frozen=True)
class StateSpec:
    """A `sequence_batching.state` entry: the graph's state input and output, the
    config's first `initial_state` (None without one) and, once read (`with_initial`),
    the value the state input has on a sequence's first request (without the batch
    dimension)."""
    input_name: str
    output_name: str
    data_type: str
    dims: tuple[int, ...]
    initial_state: dict[str, Any] | None = None
    initial: np.ndarray | None = None


def state_specs(config: dict[str, Any]) -> list[StateSpec]:
    """The config's implicit states, as the config gives them (no file is read)."""
    specs = []
    for state in config.get("sequence_batching", {}).get("state", []):
        initials = state.get("initial_state") or []
        specs.append(StateSpec(
            state.get("input_name", ""), state.get("output_name", ""),
            state.get("data_type", "TYPE_INVALID"),
            tuple(int(d) for d in state.get("dims", [])),
            initials[0] if initials else None))  # Triton uses the first
    return specs


def with_initial(specs: Sequence[StateSpec], model_dir: str = "") -> list[StateSpec]:
    """The states with their initial values read: ValueError naming the state if one
    cannot be made (a data type without a numpy type, a bad data file)."""
    return [replace(s, initial=initial_value(s, model_dir)) for s in specs]


def initial_value(spec: StateSpec, model_dir: str = "") -> np.ndarray:
    """`initial_state`'s value (zeros, or the data file in row-major order), else zeros
    of `dims` with 1 for each variable dimension (Triton gives uninitialized data there).
    A TYPE_STRING state's zeros are empty strings (Triton's zero_data: 4 zero bytes per
    element, each a length prefix of 0), its data file holds length-prefixed strings."""
    dtype = NUMPY_TYPES.get(spec.data_type)
    if dtype is None:
        raise ValueError(f"unsupported datatype {spec.data_type} for implicit state "
                         f"'{spec.input_name}'")
    initial = spec.initial_state
    if initial is None:
        return _zeros([d if d >= 0 else 1 for d in spec.dims], dtype)
    shape = [int(d) for d in initial.get("dims", [])]
    name = initial.get("name", "")
    if any(d < 0 for d in shape):
        raise ValueError(f"initial state '{name}' must have fixed dims, got {_text(shape)}")
    data_file = initial.get("data_file")
    if not data_file:
        return _zeros(shape, dtype)
    path = os.path.join(model_dir, "initial_state", data_file)
    count = int(np.prod(shape, dtype=np.int64))
    data = _read_strings(path, name) if dtype is np.object_ else np.fromfile(path, dtype)
    if data.size != count:
        raise ValueError(f"initial state '{name}': {path} holds {data.size} elements of "
                         f"{spec.data_type}, dims {_text(shape)} need {count}")
    return data.reshape(shape)


def _zeros(shape: list[int], dtype) -> np.ndarray:
    if dtype is np.object_:
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype)


def _read_strings(path: str, name: str) -> np.ndarray:
    """A file of BYTES elements, each a 4-byte little-endian length and its bytes."""
    with open(path, "rb") as file:
        raw = file.read()
    items, offset = [], 0
    while offset < len(raw):
        if offset + _LENGTH.size > len(raw):
            raise ValueError(f"initial state '{name}': {path} ends inside the length of "
                             f"element {len(items)}")
        (length,) = _LENGTH.unpack_from(raw, offset)
        offset += _LENGTH.size
        if offset + length > len(raw):
            raise ValueError(f"initial state '{name}': {path} ends inside element "
                             f"{len(items)} ({length} bytes)")
        items.append(raw[offset:offset + length])
        offset += length
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def _text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"
