"""Tensors in and out of a generation model: an input built in the datatype and shape
the model declares (a -1 dimension takes the values, as Triton's generate endpoint fits
them), and the text and token counts read from a response."""

from __future__ import annotations

from typing import Any

import numpy as np

from pbserve.core.types import InferResponse, TensorData
from pbserve.errors import ServerError
from pbserve.server.buffers import byte_view
from pbserve.server.http import codec
from pbserve.server.http.generate import fit_shape
from pbserve.server.openai.errors import OpenAIError, bad_request
from shm.tensor import BytesLayoutError, bytes_elements

_INTEGERS = {"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"}


def input_tensor(name: str, spec: dict[str, Any], values: list[Any]) -> TensorData:
    """`values` as the model's input `name` (`spec`: its metadata entry, with datatype
    and shape); a 400 naming the input when they do not fit its declaration."""
    datatype = spec["datatype"]
    try:
        shape = fit_shape(name, spec.get("shape", [-1]), len(values))
        return TensorData(name, datatype, tuple(shape),
                          codec.json_to_raw(name, datatype, shape, values))
    except ServerError as exc:
        raise bad_request(f"the model's input '{name}': {exc.message}") from None


def strings(output: TensorData) -> list[str]:
    """The elements of a BYTES output, decoded as UTF-8 (bad bytes replaced); a cut
    length prefix ends the list, a cut last element is kept as far as it goes."""
    view = byte_view(output.data)
    try:
        items = bytes_elements(view, None, bytes)
    except BytesLayoutError as exc:
        items = exc.items if exc.declared is None else [*exc.items, bytes(view[exc.offset + 4:])]
    return [item.decode("utf-8", "replace") for item in items]


def output_named(response: InferResponse, name: str) -> TensorData | None:
    for output in response.outputs:
        if output.name == name:
            return output
    return None


def text_output(response: InferResponse) -> str:
    """The response's `text_output` (its elements joined), "" without one."""
    output = output_named(response, "text_output")
    if output is None:
        return ""
    if output.datatype != "BYTES":
        raise OpenAIError(500, f"the model's 'text_output' is {output.datatype}, "
                               f"expected BYTES (a string)")
    return "".join(strings(output))


def count_output(response: InferResponse, name: str) -> int | None:
    """The first element of an integer output (`num_input_tokens`, ...), or None."""
    output = output_named(response, name)
    if output is None or output.datatype not in _INTEGERS:
        return None
    values = numbers(output)
    return int(values[0]) if values.size else None


def numbers(output: TensorData) -> np.ndarray:
    """A numeric output's elements, flat."""
    dtype = codec.NUMPY_DTYPES[output.datatype]
    return np.frombuffer(byte_view(output.data), dtype=dtype)
