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

from pbserve.core.api import InputPlacer
from pbserve.core.types import InferResponse

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


def _field_key(data: bytes, pos: int) -> tuple[int, int, int]:
    """A field's key at `pos`: (its tag, the bytes after the key that are its body's,
    where they start). A length-delimited field's length and a varint field's value are
    read past (a varint's body is then empty); IndexError where `data` ends first."""
    tag, pos = _varint(data, pos)
    kind = tag & 7
    if kind == 2:
        length, pos = _varint(data, pos)
        return tag, length, pos
    if kind == 0:
        _, pos = _varint(data, pos)
        return tag, 0, pos
    if kind == 1:
        return tag, 8, pos
    if kind == 5:
        return tag, 4, pos
    # groups (3, 4) are not in Triton's messages; 6, 7 are invalid
    raise DecodeError(f"unexpected wire type {kind}")


def _is_raw_input(tag: int) -> bool:
    return tag == (_RAW_INPUT << 3) | 2


def _split(body: bytes) -> tuple[list[memoryview], list[memoryview]]:
    """(the slices holding every field but raw_input_contents, the raw entries' data)."""
    view = memoryview(body)
    header: list[memoryview] = []
    raw: list[memoryview] = []
    size = len(body)
    pos = start = 0
    while pos < size:
        field_start = pos
        tag, length, pos = _field_key(body, pos)
        end = pos + length
        if end > size:
            raise DecodeError("truncated message")
        if _is_raw_input(tag):
            if start < field_start:
                header.append(view[start:field_start])
            raw.append(view[pos:end])
            start = end
        pos = end
    if start < size:
        header.append(view[start:size])
    return header, raw


def parse_infer_request(body: Any) -> tuple[pb.ModelInferRequest, list[Any] | None]:
    """The request without its raw contents and those contents as memoryviews; a small
    request (or one the splitter cannot read) comes back whole, with None: its
    `raw_input_contents` are then in the message. A SplitRequest (the h2 transport
    gathered it) is already split. Raises DecodeError as protobuf does."""
    if type(body) is SplitRequest:
        return pb.ModelInferRequest.FromString(body.header), body.hand_over()
    if len(body) >= SPLIT_MIN_BYTES:
        try:
            header, raw = _split(body)
        except (DecodeError, IndexError):
            pass  # protobuf's parse below gives its own error
        else:
            return pb.ModelInferRequest.FromString(b"".join(header)), raw
    return pb.ModelInferRequest.FromString(body), None


class SplitRequest:
    """A ModelInferRequest gathered by RequestGatherer: every field but the raw input
    contents (`header`, for protobuf), and the contents (`raw`), each in a buffer of
    its own; `handles[i]` is raw[i]'s InputPlacer handle (None: in process memory). A
    consumer that takes a placed buffer over sets its handle to None; `release()` gives
    back the rest."""

    __slots__ = ("header", "raw", "handles", "_placer")

    def __init__(self, header: bytes, raw: list[memoryview], handles: list[Any],
                 placer: InputPlacer) -> None:
        self.header = header
        self.raw = raw
        self.handles = handles
        self._placer = placer

    def __len__(self) -> int:
        return len(self.header) + sum(len(r) for r in self.raw)

    def hand_over(self) -> list[memoryview]:
        """The raw contents, for the request that reads them; none is kept here (a view
        kept would keep a block's pages in /dev/shm after its tensor moved out:
        InputPlacer.relieve)."""
        raw, self.raw = self.raw, []
        return raw

    def release(self) -> None:
        handles, self.handles = self.handles, [None] * len(self.handles)
        for handle in handles:
            if handle is not None:
                self._placer.drop(handle)


class RequestGatherer:
    """A large ModelInferRequest read as its bytes arrive: its fields are parsed as they
    come, each `raw_input_contents` entry is copied straight into a buffer of its own
    (placed by `placer`, in the parent's shm pool: the request's inputs then need no
    copy of their own), and the other fields, a few hundred bytes, are kept for
    protobuf. `feed` the message's `length` bytes in any pieces; `result()` once all
    are in. Malformed input raises DecodeError as protobuf would (the message's
    declared sizes never allocate more than `length`)."""

    __slots__ = ("_length", "_left", "_placer", "_header", "_raw", "_handles", "_pending",
                 "_target", "_target_left", "_filled")

    def __init__(self, length: int, placer: InputPlacer) -> None:
        self._length = length
        self._left = length  # bytes of the message still to come
        self._placer = placer
        self._header = bytearray()
        self._raw: list[memoryview] = []
        self._handles: list[Any] = []
        self._pending = b""  # a field's key and length, not yet whole
        self._target: memoryview | None = None  # the raw entry being filled
        self._target_left = 0  # bytes of the current field still to come
        self._filled = 0

    def feed(self, data: memoryview) -> None:
        try:
            self._feed(data)
        except DecodeError as exc:  # worded as the servicer words protobuf's own
            raise DecodeError(f"failed to parse the inference.ModelInferRequest message "
                              f"({self._length} bytes): {exc}") from None

    def _feed(self, data: memoryview) -> None:
        if len(data) > self._left:
            raise DecodeError("more bytes than the message's length")
        self._left -= len(data)
        pos, size = 0, len(data)
        while pos < size:
            if self._target_left:  # inside a field's body
                take = min(self._target_left, size - pos)
                if self._target is not None:
                    self._target[self._filled:self._filled + take] = data[pos:pos + take]
                    self._filled += take
                else:
                    self._header += data[pos:pos + take]
                self._target_left -= take
                pos += take
                continue
            pos = self._field_start(data, pos)
        if not self._left and (self._target_left or self._pending):
            raise DecodeError("truncated message")

    def _field_start(self, data: memoryview, pos: int) -> int:
        """Read a field's key (and a length-delimited field's length) from `data` at
        `pos`, keeping a key or length split between two pieces; the new position."""
        chunk = self._pending + bytes(data[pos:pos + 20])
        try:
            tag, length, at = _field_key(chunk, 0)
        except IndexError:  # the key or the length goes on in the next piece
            if len(chunk) >= 20:
                raise DecodeError("varint too long") from None
            self._pending = chunk
            return len(data)
        consumed = at - len(self._pending)
        self._pending = b""
        if length > self._left + len(data) - pos - consumed:
            raise DecodeError("truncated message")
        if _is_raw_input(tag):
            self._start_raw(length)
        else:
            self._header += chunk[:at]
            self._target = None
        self._target_left = length
        return pos + consumed

    def _start_raw(self, length: int) -> None:
        placed = self._placer.place(length) if length else None
        if placed is None:
            buffer, handle = memoryview(bytearray(length)), None
        else:
            buffer, handle = placed
        self._raw.append(buffer)
        self._handles.append(handle)
        self._target = buffer
        self._filled = 0

    def result(self) -> SplitRequest:
        return SplitRequest(bytes(self._header), self._raw, self._handles, self._placer)

    def discard(self) -> None:
        """The message will not be used (its call ended): give the buffers back."""
        handles, self._handles = self._handles, []
        for handle in handles:
            if handle is not None:
                self._placer.drop(handle)


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
