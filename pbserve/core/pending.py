"""A request on its way through the backend, and where its responses go."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Hashable
from typing import Callable, Protocol

from pbserve.core.types import InferRequest, InferResponse
from shm.pool import Block

_keys = itertools.count(1)


def new_key() -> int:
    """A request key of the parent's own (a frontend's are above: stub/frontends.py)."""
    return next(_keys)


class ResponseOrder(Protocol):
    """What decides when a request's responses reach its caller (preserve_ordering:
    scheduling/reorder.py). On the event loop."""

    def offer(self, pending: PendingRequest, response: InferResponse) -> None:
        """A response of `pending`; it goes on with `pending.emit`, now or later."""


class PendingRequest:
    """What the parent keeps for a request between its arrival and its final response.

    It holds a reference to each of its input blocks in the parent's pool until it
    completes (a response naming one holds its own, memory/block_refs.py); a request the
    default scheduler queues keeps its inputs in process memory until it is dispatched
    (`unstaged`, scheduling/admission.py's `stage`). Responses go to
    `deliver`, which a unary caller reads through `future` (or has handed to its
    `sink` at once: a stub's BLS call, stub_calls/bls.py) and a streaming caller through
    `stream`; once batched under preserve_ordering, by way of `order`.
    """

    __slots__ = ("key", "request", "inputs", "unstaged", "shm_wait_since", "blocks",
                 "batch_size", "batch_key", "future", "stream", "arrival_s", "arrival_ns",
                 "queue_deadline", "exec_start_ns", "_free_blocks", "done",
                 "cancelled", "instance", "on_complete", "order", "order_seq",
                 "input_ns", "compute_ns", "output_ns", "responses", "last_response_ns",
                 "model_errors", "sink")

    def __init__(self, key: int, request: InferRequest, inputs: tuple, blocks: list[Block],
                 batch_size: int, free_blocks: Callable[[list[Block]], None],
                 streaming: bool,
                 sink: Callable[[PendingRequest, InferResponse], None] | None = None
                 ) -> None:
        self.key = key
        self.request = request
        self.inputs = inputs  # the request message; None while its inputs wait outside shm
        self.unstaged: tuple | None = None  # that message without its inputs, until staged
        self.shm_wait_since = 0.0  # loop time it first found /dev/shm full (0: never)
        self.blocks = blocks
        self.batch_size = batch_size
        # what must equal its batch-mates' (scheduling/equal_inputs.py; None: anything)
        self.batch_key: Hashable = None
        # A unary request's response: awaited through `future`, or handed to `sink` in
        # the pass that read it (no turn of the loop in between)
        self.sink = sink
        self.future: asyncio.Future | None = None if streaming or sink is not None \
            else asyncio.get_running_loop().create_future()
        self.stream: asyncio.Queue | None = asyncio.Queue() if streaming else None
        self.arrival_ns = time.monotonic_ns()
        self.arrival_s = self.arrival_ns / 1e9  # the batchers' clock (precise_timer.py)
        self.queue_deadline = 0.0  # when its queue-policy timeout ends (0: none; as arrival_s)
        self.exec_start_ns = 0
        # its statistics (Triton's compute_input / compute_infer / compute_output, ns):
        # the input copy into shm, the execution, making its responses of the stub's
        self.input_ns = 0
        self.compute_ns = 0
        self.output_ns = 0
        self.responses = 0  # how many it got (a decoupled model's response_stats)
        self.last_response_ns = 0
        self.model_errors = 0  # error responses the model made (not an exception's)
        self._free_blocks = free_blocks
        self.done = False
        self.cancelled = False
        self.instance = None  # the ModelInstance running it, once dispatched
        self.on_complete: Callable[[], None] | None = None  # releases its client regions
        # holds its responses back until their turn; `order_seq`, its number there, is set
        # with it (ReorderBuffer.enter)
        self.order: ResponseOrder | None = None

    def rekey(self) -> None:
        """A key of the parent's instead of its frontend's: the stub then answers the
        parent (ModelInstance._send: a stub the frontend cannot read answers of)."""
        key = self.key = new_key()
        self.inputs = (key, *self.inputs[1:])

    def deliver(self, response: InferResponse) -> None:
        """Hand one response to the caller; a final one completes the request."""
        if self.done:
            response.release()
            return
        if response.final:
            self._complete()
        if self.order is not None:
            self.order.offer(self, response)
        elif self.stream is not None:  # `emit`, inlined: this is every response's path
            self.stream.put_nowait(response)
        elif self.sink is not None:
            self.sink(self, response)
        elif self.future is not None and not self.future.done():
            self.future.set_result(response)
        else:
            response.release()

    def emit(self, response: InferResponse) -> None:
        """Hand a response to the caller's sink (released if the caller is gone)."""
        if self.stream is not None:
            self.stream.put_nowait(response)
        elif self.sink is not None:
            self.sink(self, response)
        elif self.future is not None and not self.future.done():
            self.future.set_result(response)
        else:
            response.release()

    def _complete(self) -> None:
        self.done = True
        blocks, self.blocks = self.blocks, []
        if blocks:
            self._free_blocks(blocks)
        if self.on_complete is not None:
            on_complete, self.on_complete = self.on_complete, None
            on_complete()
