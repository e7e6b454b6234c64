"""Triton's classification extension: an output asked for as `classification: k` (HTTP:
the requested output's `parameters`; gRPC: its `int64_param`; tritonclient's
`InferRequestedOutput(name, class_count=k)`) comes back as its top k, a BYTES tensor.

What Triton's frontends do (server/src/classification.cc, http_server.cc,
grpc/infer_handler.h; the bytes checked against tritonserver 2.51, tests/
test_classification.py), and so this does, after the model answered:
* a model with `max_batch_size > 0` classifies each batch item (the output's first
  dimension) on its own: shape [batch, min(k, elements of one item)]; any other model
  classifies the whole output: shape [min(k, elements)]. k larger than that is cut.
* each element is `"<value>:<index>"`, or `"<value>:<index>:<label>"` when the output
  has a label (below) at that index; floats print as C's `%f` (`0.500000`, `inf`,
  `nan`), integers in decimal; the index counts within the batch item.
* the order is the values', highest first, as Triton's `std::sort` over the indices with
  `values[a] > values[b]` leaves it: for 16 elements or fewer (an insertion sort) equal
  values keep their index order; beyond, equal values (and NaN, which compares false
  both ways) come in the order libstdc++'s introsort leaves them, which `_std_sort`
  replays step by step when ties or NaN decide the answer. Replaying is Python on the
  event loop, so only for batch items of up to REPLAY_MAX elements; a larger one puts
  equal values in index order and NaN last (Triton's order there is its sort's
  accident; the values and the indices of distinct values are the same).
* a label is line `index` of the output's `label_filename` (the model's directory), as
  the model handle gives it; an empty line is no label.
* BYTES, BOOL, FP16 and BF16 outputs are refused (INVALID_ARG "class result not
  available for output due to unsupported type '<type>'": Triton 2.51 crashes on BYTES
  (a division by zero), later versions answer this); so is a batch item of more than a
  million elements ("classification output tensor too large", as later versions).
* k is Triton's uint32: the low 32 bits of what the client sent. Over HTTP, 0 asks for
  the plain output; over gRPC, k <= 0 is refused (the codecs check what was sent).
* an output of no elements gives shape [0] ([batch, 0]) and no strings (Triton 2.51's
  server dies on it).

The core's response keeps its other outputs; a classified output's new bytes live in
process memory, and `release()` still gives back the model's blocks.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import Protocol

import numpy as np

from pbserve.core.types import InferResponse, TensorData
from pbserve.errors import ServerError, invalid_arg
from pbserve.server.buffers import byte_view

# The datatypes Triton classifies, as little-endian numpy types.
_NUMPY = {name: np.dtype(code) for name, code in {
    "UINT8": "<u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8",
    "INT8": "<i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8",
    "FP32": "<f4", "FP64": "<f8"}.items()}
MAX_ELEMENTS = 1_000_000  # per batch item (Triton's kMaxClassificationElements)
# The largest batch item whose ties and NaN are placed by replaying Triton's sort
# (about 10 ms of Python at this size, on the event loop); beyond, see `_top_indices`.
REPLAY_MAX = 4096
UINT32 = 0xFFFFFFFF
_THRESHOLD = 16  # libstdc++'s _S_threshold


class Classified(Protocol):
    """What classifying needs of the model that answered (api.ModelHandle)."""

    @property
    def batched(self) -> bool: ...

    def output_labels(self, output: str) -> list[bytes] | None: ...


def class_count_error() -> ServerError:
    """An HTTP `classification` that is not a JSON unsigned integer (Triton's words)."""
    return invalid_arg("Unable to set 'classification': attempt to access JSON "
                       "non-unsigned-integer as unsigned-integer")


async def classified(pending: Awaitable[InferResponse], model: Classified,
                     classes: dict[str, int]) -> InferResponse:
    """The response of `pending` with the outputs of `classes` classified."""
    return classify(await pending, model, classes)


def classify(response: InferResponse, model: Classified,
             classes: dict[str, int]) -> InferResponse:
    """`response` with each output named in `classes` (name -> k) replaced by its top k;
    an error response instead (this one released) when one cannot be classified."""
    if response.error is not None or not response.outputs:
        return response
    try:
        outputs = [top_k(t, classes[t.name], model) if t.name in classes and t.shm is None
                   else t for t in response.outputs]
    except ServerError as error:
        response.release()
        return InferResponse(response.model_name, response.model_version, response.id,
                             error=error, final=response.final)
    response.outputs = outputs
    return response


def top_k(tensor: TensorData, k: int, model: Classified) -> TensorData:
    """`tensor` classified: its top `k` (per batch item when the model batches)."""
    dtype = _NUMPY.get(tensor.datatype)
    if dtype is None:
        raise invalid_arg(f"class result not available for output due to unsupported "
                          f"type '{tensor.datatype}'")
    shape = tensor.shape
    batch = shape[0] if model.batched and shape else 0
    per_item = math.prod(shape[1:] if batch else shape)
    if per_item > MAX_ELEMENTS:
        raise invalid_arg("classification output tensor too large")
    values = np.frombuffer(byte_view(tensor.data), dtype=dtype)
    labels = model.output_labels(tensor.name) or ()
    floating = dtype.kind == "f"
    out = bytearray()
    for item in range(max(batch, 1)):
        start = item * per_item
        if start + per_item > values.size:
            continue  # shorter than its shape: Triton classifies no bytes
        chunk = values[start:start + per_item]
        for index in _top_indices(chunk, k):
            text = f"{_value_text(chunk[index].item(), floating)}:{index}".encode()
            label = labels[index] if index < len(labels) else b""
            if label:
                text += b":" + label
            out += len(text).to_bytes(4, "little")
            out += text
    count = min(k, per_item)
    return TensorData(tensor.name, "BYTES", (batch, count) if batch else (count,),
                      bytes(out))


def _value_text(value: float | int, floating: bool) -> str:
    """std::to_string: `%f` for float and double (glibc writes a negative NaN "-nan")."""
    if not floating:
        return str(value)
    if value != value:
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    return "%f" % value


def _top_indices(values: np.ndarray, k: int) -> list[int]:
    """The indices of the `k` highest of `values`, in the order Triton gives them (past
    REPLAY_MAX elements, equal values by index and NaN last)."""
    size = values.size
    count = min(k, size)
    if count == 0:
        return []
    nan = np.isnan(values) if values.dtype.kind == "f" else None
    if nan is not None and nan.any():
        if size <= REPLAY_MAX:
            return _std_sort(values.tolist())[:count]
        kept = np.flatnonzero(~nan)
        order = kept[_highest(values[kept], count)[0]].tolist()
        return order + np.flatnonzero(nan)[:count - len(order)].tolist()
    order, tied = _highest(values, count)
    if tied and size <= REPLAY_MAX:
        return _std_sort(values.tolist())[:count]
    return order.tolist()


def _highest(values: np.ndarray, count: int) -> tuple[np.ndarray, bool]:
    """The indices of the `count` highest of `values` (no NaN), highest first and equal
    values by index, and whether equal values decide which come or in what order (then
    any sort's order is as good: Triton's is its std::sort's)."""
    size = values.size
    count = min(count, size)
    if count == 0:
        return np.empty(0, np.intp), False
    if count < size:
        kth = np.partition(values, size - count)[size - count]  # the lowest one taken
        above = np.flatnonzero(values > kth)
        equal = np.flatnonzero(values == kth)
        tied = equal.size > count - above.size
        chosen = np.concatenate((above, equal[:count - above.size]))
    else:
        chosen, tied = np.arange(size), False
    # highest first, equal values keeping their order: a stable sort of the reversal
    last = chosen.size - 1
    order = chosen[(last - np.argsort(values[chosen][::-1], kind="stable"))[::-1]]
    if not tied:
        ranked = values[order]
        tied = bool((ranked[1:] == ranked[:-1]).any())
    return order, tied


def _std_sort(values: list) -> list[int]:
    """The indices 0..n-1 sorted by libstdc++'s `std::sort` with the comparison
    `values[a] > values[b]`, step by step (introsort: median-of-three quicksort down to
    runs of 16, a heap sort past 2*log2(n) levels, then one insertion sort), so that
    equal values and NaN end where Triton's end."""
    idx = list(range(len(values)))
    n = len(idx)
    if n < 2:
        return idx

    def comp(a: int, b: int) -> bool:
        return values[a] > values[b]

    def move_median_to_first(result: int, a: int, b: int, c: int) -> None:
        ia, ib, ic = idx[a], idx[b], idx[c]
        if comp(ia, ib):
            pick = b if comp(ib, ic) else (c if comp(ia, ic) else a)
        elif comp(ia, ic):
            pick = a
        elif comp(ib, ic):
            pick = c
        else:
            pick = b
        idx[result], idx[pick] = idx[pick], idx[result]

    def unguarded_partition(first: int, last: int, pivot: int) -> int:
        # unguarded in C++ too: the pivot stops the scan down (no value is greater
        # than itself); `end` keeps a scan up past NaN's non-order inside the list
        p = idx[pivot]
        end = last
        while True:
            while first < end and comp(idx[first], p):
                first += 1
            last -= 1
            while comp(p, idx[last]):
                last -= 1
            if not first < last:
                return first
            idx[first], idx[last] = idx[last], idx[first]
            first += 1

    def adjust_heap(first: int, hole: int, length: int, value: int) -> None:
        top = hole
        child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if comp(idx[first + child], idx[first + child - 1]):
                child -= 1
            idx[first + hole] = idx[first + child]
            hole = child
        if (length & 1) == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            idx[first + hole] = idx[first + child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and comp(idx[first + parent], value):
            idx[first + hole] = idx[first + parent]
            hole = parent
            parent = (hole - 1) // 2
        idx[first + hole] = value

    def heap_sort(first: int, last: int) -> None:
        length = last - first
        parent = (length - 2) // 2
        while True:  # make_heap
            adjust_heap(first, parent, length, idx[first + parent])
            if parent == 0:
                break
            parent -= 1
        while last - first > 1:  # sort_heap
            last -= 1
            value = idx[last]
            idx[last] = idx[first]
            adjust_heap(first, 0, last - first, value)

    def introsort_loop(first: int, last: int, depth: int) -> None:
        while last - first > _THRESHOLD:
            if depth == 0:
                heap_sort(first, last)
                return
            depth -= 1
            move_median_to_first(first, first + 1, first + (last - first) // 2, last - 1)
            cut = unguarded_partition(first + 1, last, first)
            introsort_loop(cut, last, depth)
            last = cut

    def linear_insert(last: int, floor: int) -> None:
        # unguarded in C++: the first 16 hold a value that stops it (`floor` keeps a
        # comparison that is no order, NaN's, inside the list)
        value = idx[last]
        previous = last - 1
        while previous >= floor and comp(value, idx[previous]):
            idx[last] = idx[previous]
            last = previous
            previous -= 1
        idx[last] = value

    def insertion_sort(first: int, last: int) -> None:
        for i in range(first + 1, last):
            if comp(idx[i], idx[first]):
                value = idx[i]
                idx[first + 1:i + 1] = idx[first:i]
                idx[first] = value
            else:
                linear_insert(i, first)

    introsort_loop(0, n, 2 * (n.bit_length() - 1))
    if n > _THRESHOLD:
        insertion_sort(0, _THRESHOLD)
        for i in range(_THRESHOLD, n):
            linear_insert(i, 0)
    else:
        insertion_sort(0, n)
    return idx
