"""Ragged batching for the built-in backends (Triton's docs/user_guide/ragged_batching.md):
an input with `allow_ragged_batch` reaches the framework as one 1-D tensor, the requests'
contents concatenated; the config's `batch_input`s are tensors the backend makes from
the batch (each request's element count, their running sum, shapes...), and a
`batch_output` of kind BATCH_SCATTER_WITH_INPUT_SHAPE is cut back into each request's
piece with the shape of its source input. As Triton's backend utilities do
(backend_input_collector.cc BatchInputShape / ProcessBatchInput,
backend_output_responder.cc ProcessBatchOutput); numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

BATCH_INPUT_KINDS = ("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT",
                     "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
                     "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", "BATCH_ITEM_SHAPE",
                     "BATCH_ITEM_SHAPE_FLATTEN")
_BATCH_INPUT_TYPES = {"TYPE_INT32": np.int32, "TYPE_FP32": np.float32}


@dataclass(frozen=True)
class BatchInput:
    """One `batch_input` of the config: the framework inputs it fills (`targets`), from
    which request input (`source`)."""
    kind: str
    targets: tuple[str, ...]
    data_type: str
    source: str


@dataclass(frozen=True)
class BatchOutput:
    """One `batch_output`: the outputs (`targets`) cut by the shapes of `source`."""
    targets: tuple[str, ...]
    source: str


def ragged_inputs(config: dict[str, Any]) -> frozenset[str]:
    """The config's inputs with `allow_ragged_batch` (only a batching model has any)."""
    if int(config.get("max_batch_size", 0)) <= 0:
        return frozenset()
    return frozenset(io["name"] for io in config.get("input", [])
                     if io.get("allow_ragged_batch"))


def batch_inputs(config: dict[str, Any]) -> list[BatchInput]:
    """The config's `batch_input` list; ValueError (the load fails) for one Triton would
    refuse: an unknown kind, a data type other than TYPE_INT32 / TYPE_FP32, a source
    that is not one of the config's inputs."""
    found = []
    for entry in config.get("batch_input", []):
        kind = str(entry.get("kind", "BATCH_ELEMENT_COUNT"))
        targets = tuple(entry.get("target_name", []))
        data_type = str(entry.get("data_type", "TYPE_INVALID"))
        if kind not in BATCH_INPUT_KINDS:
            raise ValueError(f"unknown batch input kind '{kind}'")
        if data_type not in _BATCH_INPUT_TYPES:
            raise ValueError(f"batch input '{', '.join(targets)}': data type {data_type} "
                             "is not supported, use TYPE_INT32 or TYPE_FP32")
        source = _source(config, entry, f"batch input kind '{kind}'")
        found.append(BatchInput(kind, targets, data_type, source))
    return found


def batch_input_targets(config: dict[str, Any]) -> list[str]:
    """The framework inputs the batch inputs fill (a batching model's; none otherwise):
    they count as the model's inputs."""
    if int(config.get("max_batch_size", 0)) <= 0:
        return []
    return [target for spec in batch_inputs(config) for target in spec.targets]


def batch_outputs(config: dict[str, Any]) -> list[BatchOutput]:
    """The config's `batch_output` list (BATCH_SCATTER_WITH_INPUT_SHAPE, the one kind)."""
    found = []
    for entry in config.get("batch_output", []):
        kind = str(entry.get("kind", "BATCH_SCATTER_WITH_INPUT_SHAPE"))
        if kind != "BATCH_SCATTER_WITH_INPUT_SHAPE":
            raise ValueError(f"unknown batch output kind '{kind}'")
        source = _source(config, entry, f"batch output kind '{kind}'")
        found.append(BatchOutput(tuple(entry.get("target_name", [])), source))
    return found


def _source(config: dict[str, Any], entry: dict[str, Any], what: str) -> str:
    """A batch input's or output's one `source_input`, which must be a config input."""
    sources = list(entry.get("source_input", []))
    if len(sources) != 1 or sources[0] not in {io["name"] for io in config.get("input", [])}:
        raise ValueError(f"{what} expects 1 source input that is an input of the model, "
                         f"got {sources}")
    return sources[0]


def batch_input_value(spec: BatchInput, shapes: Sequence[tuple[int, ...]]) -> np.ndarray:
    """The tensor of `spec` for a batch whose requests' source inputs have `shapes`
    (each with its batch dimension first)."""
    dtype = _BATCH_INPUT_TYPES[spec.data_type]
    counts = [int(np.prod(shape)) for shape in shapes]
    if spec.kind == "BATCH_ELEMENT_COUNT":
        values: list[int] = counts
    elif spec.kind == "BATCH_ACCUMULATED_ELEMENT_COUNT":
        values = list(np.cumsum(counts))
    elif spec.kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO":
        values = [0, *np.cumsum(counts)]
    elif spec.kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":
        return np.zeros(max(counts, default=0), dtype)  # its shape is what it says
    else:  # BATCH_ITEM_SHAPE(_FLATTEN): each batch item's shape past dimension 0
        items = np.array([shape[1:] for shape in shapes for _ in range(shape[0])],
                         dtype).reshape(-1, max((len(s) - 1 for s in shapes), default=0))
        return items.reshape(-1) if spec.kind == "BATCH_ITEM_SHAPE_FLATTEN" else items
    return np.array(values, dtype)


def scatter_with_input_shape(array: np.ndarray, dims: Sequence[int],
                             shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """Cut a batch output into each request's piece: the output's config shape with
    the batch dimension first (`dims`), each -1 taken from that request's source input
    shape (`shapes`), its elements taken in order from the flat `array`."""
    flat = array.reshape(-1)
    pieces, start = [], 0
    for shape in shapes:
        piece = tuple(shape[i] if d == -1 and i < len(shape) else d
                      for i, d in enumerate(dims))
        count = int(np.prod(piece))
        if start + count > flat.size:
            raise ValueError(f"batch output of {flat.size} elements is too small for the "
                             f"requests' shapes {[list(s) for s in shapes]}")
        pieces.append(flat[start:start + count].reshape(piece))
        start += count
    return pieces
