"""A large infer request's body gathered as it arrives, its binary inputs straight into
the parent's shm pool (the HTTP counterpart of grpc/wire.py's RequestGatherer).

The binary tensor extension puts a JSON header of `Inference-Header-Content-Length`
bytes first, then the inputs back to back, each `binary_data_size` bytes, in the order
of `inputs`. So once the header is in, the gatherer knows where each input's bytes go:
into a block of its own from the core's InputPlacer, which the request then takes over
(core/scheduling/admission.py `Admission._copy_inputs`) instead of copying the tensor
into shm once more. One copy of a tensor's bytes in the parent, from the socket's chunk
to shm, instead of three (into the body, out of it, into shm).

A body whose header cannot be read, or whose sizes do not add up, is kept whole as any
other body: the codec then gives Triton's error for it. What no request took goes back
to the pool with `release()`; the connection calls it once the request was answered,
or when it is lost, so a block never outlives the request that might read it.
"""

from __future__ import annotations

from typing import Any

from pbserve.core.api import InputPlacer
from pbserve.server import jsonio

# A body at least this large (by Content-Length) is gathered by a PlacedBody; smaller
# ones are copied twice at most and not worth a block each.
PLACE_MIN_BYTES = 64 * 1024


_HANDED_OVER = memoryview(b"")  # in place of an input's view once the request has it


class PlacedBody:
    """`add` the body's `size` bytes in any chunks; `value()` is the PlacedBody itself
    once its inputs were placed, else the whole body's bytes.

    Once placed: `header` is the parsed JSON header and `inputs` the binary inputs in
    order, each a (view, handle) pair: the view holds the input's bytes, the handle is
    its placer's (None: in process memory)."""

    __slots__ = ("header", "inputs", "_size", "_header_size", "_raw", "_placer",
                 "_sizes", "_next", "_filled", "_whole")

    def __init__(self, size: int, header_size: int, placer: InputPlacer) -> None:
        self.header: Any = None
        self.inputs: list[tuple[memoryview, Any]] = []
        self._size = size
        self._header_size = header_size
        self._raw = bytearray()  # the JSON header as it comes (the whole body, unplaced)
        self._placer = placer
        self._sizes: list[int] = []  # each binary input's, from the header
        self._next = 0  # the input being filled
        self._filled = 0  # its bytes so far
        self._whole = False  # the header did not say where the bytes go: keep them all

    def add(self, chunk: bytes) -> None:
        data = memoryview(chunk)
        if self._whole:
            self._raw += data
            return
        if self.header is None:
            need = self._header_size - len(self._raw)
            self._raw += data[:need]
            if len(self._raw) < self._header_size:
                return
            self._place()
            if self._whole:
                self._raw += data[need:]
                return
            data = data[need:]
        self._fill(data)

    def _fill(self, data: memoryview) -> None:
        """Copy `data` into the inputs' buffers, each made when its first byte comes
        (one of no bytes when the one before it is full): a client that stops sending
        holds no block for an input it has not started."""
        inputs, sizes = self.inputs, self._sizes
        while self._next < len(sizes):
            if self._next == len(inputs):
                if sizes[self._next] and not data:
                    return
                inputs.append(self._buffer(sizes[self._next]))
            target = inputs[self._next][0]
            take = min(len(target) - self._filled, len(data))
            if take:
                target[self._filled:self._filled + take] = data[:take]
                self._filled += take
                data = data[take:]
            if self._filled < len(target):
                return
            self._next += 1
            self._filled = 0

    def _buffer(self, size: int) -> tuple[memoryview, Any]:
        """A block of the pool for an input's bytes and its handle; in process memory
        (handle None) when /dev/shm cannot take it now: the request copies it later."""
        placed = self._placer.place(size) if size else None
        return placed if placed is not None else (memoryview(bytearray(size)), None)

    def _place(self) -> None:
        """Parse the header and give each binary input a block; `_whole` when the header
        does not account for the body's bytes (the codec will say what is wrong)."""
        parsed = _binary_sizes(self._raw)
        if parsed is None or sum(parsed[1]) != self._size - self._header_size:
            self._whole = True
            return
        self.header, self._sizes = parsed
        self._raw = bytearray()

    def value(self) -> "PlacedBody | bytearray":
        return self._raw if self._whole else self

    def hand_over(self) -> list[tuple[memoryview, Any]]:
        """The binary inputs, for the request that reads them. The body keeps only their
        handles (to give back what no request takes): a view kept here would keep a
        block's pages in /dev/shm after its tensor moved out (InputPlacer.relieve)."""
        inputs = self.inputs
        self.inputs = [(_HANDED_OVER, handle) for _, handle in inputs]
        return inputs

    def release(self) -> None:
        """Give back every block no request took (idempotent)."""
        inputs, self.inputs = self.inputs, []
        self._sizes = []
        for _, handle in inputs:
            if handle is not None:
                self._placer.drop(handle)


def _binary_sizes(raw: bytearray) -> tuple[Any, list[int]] | None:
    """The parsed header and the `binary_data_size` of each input that has one, in
    order; None unless it is a JSON object with an `inputs` array whose sizes are
    non-negative integers."""
    try:
        header = jsonio.loads(raw)
    except jsonio.DecodeError:
        return None
    inputs = header.get("inputs") if isinstance(header, dict) else None
    if not isinstance(inputs, list):
        return None
    sizes = []
    for item in inputs:
        params = item.get("parameters") if isinstance(item, dict) else None
        if not isinstance(params, dict) or "binary_data_size" not in params:
            continue
        size = params["binary_data_size"]
        if type(size) is not int or size < 0:
            return None
        sizes.append(size)
    return header, sizes
