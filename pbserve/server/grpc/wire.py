"""ModelInfer's messages as bytes, without protobuf touching the tensor bytes.

grpcio hands the servicer the request's bytes and sends the bytes it returns (the
method is registered without a deserializer or serializer, grpc/server.py). A large
request is split at its top-level fields: the `raw_input_contents` entries become
memoryview slices of the received bytes (the core copies each once, into its pool) and
the other fields, a few hundred bytes, are parsed by protobuf. A response is its header
message (everything but `raw_output_contents`) serialized by protobuf, followed by one
`raw_output_contents` field per output written straight from the output's buffer: the
wire format of repeated fields lets them follow the rest in any order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from pbserve.backend.types import InferResponse

# A request this small is parsed whole: splitting it costs more than the copies it saves.
SPLIT_MIN_BYTES = 64 * 1024
_RAW_INPUT = 7  # ModelInferRequest.raw_input_contents
_RAW_OUTPUT_TAG = b"\x32"  # ModelInferResponse.raw_output_contents (6), length-delimited


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long")


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _split(body: bytes) -> tuple[list[memoryview], list[memoryview]]:
    """(the slices holding every field but raw_input_contents, the raw entries' data)."""
    view = memoryview(body)
    header: list[memoryview] = []
    raw: list[memoryview] = []
    size = len(body)
    pos = start = 0
    while pos < size:
        field_start = pos
        tag, pos = _varint(body, pos)
        kind = tag & 7
        if kind == 2:
            length, pos = _varint(body, pos)
            end = pos + length
            if end > size:
                raise DecodeError("truncated message")
            if tag >> 3 == _RAW_INPUT:
                if start < field_start:
                    header.append(view[start:field_start])
                raw.append(view[pos:end])
                start = end
            pos = end
        elif kind == 0:
            _, pos = _varint(body, pos)
        elif kind == 1:
            pos += 8
        elif kind == 5:
            pos += 4
        else:  # groups (3, 4) are not in Triton's messages; 6, 7 are invalid
            raise DecodeError(f"unexpected wire type {kind}")
    if pos != size:
        raise DecodeError("truncated message")
    if start < size:
        header.append(view[start:size])
    return header, raw


def parse_infer_request(body: bytes) -> tuple[pb.ModelInferRequest, list[Any] | None]:
    """The request without its raw contents and those contents as memoryviews; a small
    request (or one the splitter cannot read) comes back whole, with None: its
    `raw_input_contents` are then in the message. Raises DecodeError as protobuf does."""
    if len(body) >= SPLIT_MIN_BYTES:
        try:
            header, raw = _split(body)
        except (DecodeError, IndexError):
            pass  # protobuf's parse below gives its own error
        else:
            return pb.ModelInferRequest.FromString(b"".join(header)), raw
    return pb.ModelInferRequest.FromString(body), None


class ResponseParts:
    """A response's wire bytes in pieces (infer_response_parts) and what frees the
    buffers they view once they are sent."""

    __slots__ = ("parts", "release", "size")

    def __init__(self, parts: list[Any], release: Callable[[], None]) -> None:
        self.parts = parts
        self.release = release
        self.size = sum(len(part) for part in parts)


def infer_response_parts(response: InferResponse, header: pb.ModelInferResponse
                         ) -> list[Any]:
    """The wire bytes of a response, in pieces: `header` (the response without raw
    contents) serialized, then each output's raw contents from its own buffer."""
    parts: list[Any] = [header.SerializeToString()]
    for tensor in response.outputs:
        if tensor.shm is not None:  # written into the client's region: no data here
            parts.append(_RAW_OUTPUT_TAG + b"\x00")
            continue
        data = _flat(tensor.data)
        parts.append(_RAW_OUTPUT_TAG + varint_bytes(len(data)))
        parts.append(data)
    return parts


def _flat(data: Any) -> Any:
    """The buffer as one whose len() is its size in bytes."""
    if type(data) is bytes or type(data) is bytearray:
        return data
    view = memoryview(data)
    return view if view.ndim == 1 and view.itemsize == 1 else view.cast("B")
