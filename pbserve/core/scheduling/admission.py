"""A model's request admission: what a request goes through before its scheduler queues
it, and what the scheduler asks of it as it leaves the queue (scheduler.py `Staging`).

`Admission.submit` validates a request (Triton's messages; the validator remembers the
shapes and sizes that passed), puts its inputs in the parent's pool, makes its message
for the stub and queues it. An input in a client's region is named, not copied, and one
a frontend gathered in the pool already (memory/input_placer.py) is taken over. With the
default scheduler a request that will wait keeps its inputs in process memory, and
`stage` copies them as an instance takes it, so that a queue holds no /dev/shm
(docs/architecture.md, "Request path", step 2).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Callable

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.config.model_config import is_decoupled
from pbserve.core.instances.outage import Outage
from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.memory.shm_upkeep import (
    SHM_WAIT_S, shm_capacity, too_large_message, waited_message)
from pbserve.core.observability.metrics import ModelStats
from pbserve.core.pending import PendingRequest, new_key
from pbserve.core.scheduling.scheduler import Scheduler
from pbserve.core.scheduling.sequence_batcher import SequenceBatcher
from pbserve.core.types import InferRequest, InferResponse
from pbserve.core.validation import RequestValidator
from pbserve.errors import ErrorCode, ServerError
from shm.pool import Block
from shm.region import ShmExhausted
from stub import protocol as p

# A request waits in a busy stub's queue (ModelInstance.can_queue_another) only with inputs
# up to this size: there they hold shm that a running request may need for its outputs.
AHEAD_MAX_BYTES = 1 << 20


class Admission:
    """The way in of one model's requests under its completed config: it makes the
    model's `scheduler` (Triton's choice: the sequence batcher when configured, else the
    dynamic batcher or the default scheduler) and queues requests on it. `stats` counts
    the requests pending; `outage` refuses new ones while no instance can run."""

    def __init__(self, name: str, version: str, cfg: mc.ModelConfig, stats: ModelStats,
                 refs: BlockRefs, outage: Outage) -> None:
        self.name = name
        self.version = version
        self.decoupled = is_decoupled(cfg)
        self.validator = RequestValidator(cfg)
        self.output_names = tuple(o.name for o in cfg.output)  # for requests naming none
        self._stats = stats
        self._refs = refs
        self._outage = outage
        self._log = logging.getLogger(f"pbserve.model.{name}")
        sequences = cfg.HasField("sequence_batching")
        # Only the default scheduler's requests wait with their inputs out of shm (the
        # sequence batcher edits the message it queues).
        self._stages = not sequences
        # A batcher's queue policy and sequences decide what a queued request's timeout does.
        self._batcher_times_out = sequences or cfg.HasField("dynamic_batching")
        self.scheduler: Scheduler | SequenceBatcher = \
            SequenceBatcher(cfg, self) if sequences else Scheduler(cfg, self)

    def submit(self, request: InferRequest, streaming: bool, descs: tuple | None = None,
               trace: tuple[int, str] | None = None,
               sink: Callable[[PendingRequest, InferResponse], None] | None = None,
               key: int = 0) -> PendingRequest:
        """Validate, place the inputs in shm, queue. `descs`: the inputs already are in
        shm (a BLS call's, in the caller's pool): they are passed on, not copied.
        `trace`: the request's trace id and context, for `request.trace()`. `sink`: where
        a unary request's response goes instead of its future (PendingRequest). `key`:
        the request's key in a frontend process's key space (its stub answers that
        frontend itself: Model.direct_route); 0: one of the parent's."""
        if self._outage.error is not None:
            raise self._outage.error
        batch_size = self.validator.validate(request)
        output_shm = None
        if request.output_shm:
            output_shm = self._output_shm(request)
        staged = True
        input_ns = 0
        if descs is None:
            # A request an idle instance takes at once is copied now, as always; one that
            # will wait (or that /dev/shm cannot take now) is copied when dispatched.
            if self._stages and not self.scheduler.takes_now() \
                    and any([t.shm is None for t in request.inputs]):
                staged = False
            else:
                try:
                    copying = time.monotonic_ns()
                    descs, blocks = self._copy_inputs(request, batch_size)
                    input_ns = time.monotonic_ns() - copying
                except ShmExhausted:
                    if not self._stages:
                        raise
                    staged = False
            if not staged:
                descs, blocks = (), []  # `stage` copies them, or takes their placed blocks
                for tensor in request.inputs:
                    if tensor.placed is not None:  # moved out of shm if it runs short
                        tensor.placed.park(tensor)
        else:
            descs = tuple((d[0], d[1], self.validator.model_shape(t, batch_size), *d[3:])
                          for d, t in zip(descs, request.inputs))
            # The parent's blocks among them (an ensemble's tensors, a BLS caller's own
            # inputs) stay alive while this request may read them: until its stub has
            # answered, even when the caller stopped waiting (cancelled) before that.
            hold = self._refs.hold
            blocks = [Block(d[3], d[4], d[5]) for d in descs if hold((d[3], d[4]))]
        key = key or new_key()
        params = json.dumps(request.parameters) if request.parameters else "{}"
        # None asked for means every output of the config (Triton's Normalize): the model
        # sees them as requested, and an output it returns that is not one is dropped.
        requested = tuple(request.requested_outputs or self.output_names)
        # The stub may answer with an input as it is when the parent owns its block (it
        # counts references, memory/block_refs.py) and the model answers once per request.
        lendable = not self.decoupled and bool(descs) and all(
            self._refs.is_held((d[3], d[4])) for d in descs)
        msg = p.request_msg(key=key, request_id=request.id,
                            correlation_id=request.correlation_id, flags=request.flags,
                            parameters_json=params, timeout_us=request.timeout_us,
                            requested=requested, inputs=descs, lendable=lendable,
                            output_shm=output_shm, trace=trace,
                            gpu_outputs=request.gpu_outputs)
        pending = PendingRequest(key, request, msg if staged else None, blocks, batch_size,
                                 self.free_blocks, streaming, sink)
        pending.input_ns = input_ns
        if not staged:
            pending.unstaged = msg
        self._queue(pending)
        return pending

    def submit_made(self, request: InferRequest, msg: tuple, batch_size: int,
                    sink: Callable[[PendingRequest, InferResponse], None],
                    answerable: bool) -> PendingRequest:
        """Queue a unary request a frontend process validated and made the stub's
        message of (frontends/direct.py `stub_message`): its inputs are in that
        frontend's pool (not copied, not held here) and its key is the frontend's, under
        which its stub answers the frontend, unless not `answerable` (then it gets a key
        of this process's, and its answer comes here)."""
        if self._outage.error is not None:
            raise self._outage.error
        if not answerable:
            msg = (new_key(), *msg[p.REQ_ID:])
        pending = PendingRequest(msg[p.REQ_KEY], request, msg, [], batch_size,
                                 self.free_blocks, False, sink)
        self._queue(pending)
        return pending

    def _queue(self, pending: PendingRequest) -> None:
        """Hand a request admitted to the scheduler, its timeout watched."""
        request = pending.request
        # The request's client regions are held until it completes (memory/shared_memory.py).
        pending.on_complete, request._shm_release = request._shm_release, None
        self._stats.pending += 1
        self.scheduler.submit(pending)
        if request.timeout_us > 0:
            asyncio.get_running_loop().call_later(request.timeout_us / 1e6, self.expire,
                                                  pending)

    def warmup_request(self, request: InferRequest) -> PendingRequest:
        """A warmup request (instances/warmup.py), validated and in shared memory, for an
        instance to run directly (no scheduler, no statistics)."""
        batch_size = self.validator.validate(request)
        descs, blocks = self._copy_inputs(request, batch_size)
        key = new_key()
        msg = p.request_msg(key=key, request_id=request.id,
                            correlation_id=request.correlation_id, flags=request.flags,
                            parameters_json="{}", timeout_us=0, requested=self.output_names,
                            inputs=descs, lendable=False, output_shm=None)
        return PendingRequest(key, request, msg, blocks, batch_size, self.free_blocks,
                              streaming=self.decoupled)

    def expire(self, pending: PendingRequest) -> None:
        """The request's own timeout passed: a running request is cancelled (the model
        decides). A queued one fails with Triton's "Request timeout expired", unless a
        batcher owns the queue: its queue policy (allow_timeout_override, DELAY) and its
        sequences decide what a timeout does there."""
        if pending.done or pending.cancelled:
            return
        if pending.instance is not None:
            pending.instance.cancel(pending.key)
        elif self._batcher_times_out:
            return
        elif self.scheduler.remove(pending):
            self.fail(pending, ServerError(ErrorCode.UNAVAILABLE, "Request timeout expired"))

    def fail(self, pending: PendingRequest, error: ServerError) -> None:
        """`error` is the request's response: it ends before `execute`."""
        pending.deliver(InferResponse(self.name, self.version, pending.request.id,
                                      error=error))

    def _output_shm(self, request: InferRequest) -> dict[str, tuple[str, int, int]]:
        """Where the stub writes outputs the client wants in its regions: name ->
        (window token, offset, byte_size)."""
        assert request.output_shm is not None
        if self.decoupled:
            name = next(iter(request.output_shm))
            raise ServerError(ErrorCode.INVALID_ARG, (
                f"output '{name}' for model '{self.name}': shared-memory outputs are not "
                f"supported for models using the decoupled transaction policy (each "
                f"response would overwrite the region)"))
        return {name: (ref.token, ref.offset, ref.byte_size)
                for name, ref in request.output_shm.items()}

    def _copy_inputs(self, request: InferRequest, batch_size: int
                     ) -> tuple[tuple, list[Block]]:
        """One copy of each input into the parent's pool; descriptors for the stub. An
        input in a client's region is not copied: the stub reads it there; nor is one a
        frontend gathered in the pool already (memory/input_placer.py): its block is
        taken over."""
        descs = []
        blocks = []
        taken = []
        try:
            for tensor in request.inputs:
                if tensor.shm is not None:
                    descs.append((tensor.name, tensor.datatype,
                                  self.validator.model_shape(tensor, batch_size),
                                  tensor.shm.token, tensor.shm.offset, tensor.shm.byte_size))
                    continue
                placed = tensor.placed
                if placed is not None and placed.take():
                    taken.append(placed)
                    block = placed.block  # gathered there by the frontend: no copy
                else:
                    block = self._refs.copy_in(tensor.data)
                    blocks.append(block)
                shape = self.validator.model_shape(tensor, batch_size)
                descs.append((tensor.name, tensor.datatype, shape, block.region,
                              block.offset, block.nbytes))
        except BaseException:
            self.free_blocks(blocks)
            for placed in taken:
                placed.give_back()  # still the frontend's: a later try takes it again
            raise
        blocks.extend(placed.block for placed in taken)
        return tuple(descs), blocks

    # -- what the scheduler asks (scheduler.py `Staging`) -------------------------------
    def may_wait_ahead(self, pending: PendingRequest) -> bool:
        """Whether the request may wait in a busy stub's queue: not with more than
        AHEAD_MAX_BYTES of inputs still to copy into shm (they would hold it there)."""
        return pending.inputs is not None or \
            _input_bytes(pending.request) <= AHEAD_MAX_BYTES

    def stage(self, pending: PendingRequest) -> bool:
        """Copy a request's inputs into the parent's pool as it goes to an instance (the
        default scheduler's requests wait for one with their inputs in process memory,
        so a queue never holds /dev/shm). False when it cannot go now: /dev/shm is full
        (it waits, and is tried again) or the request can never fit (it failed)."""
        msg = pending.unstaged
        assert msg is not None
        copying = time.monotonic_ns()
        try:
            descs, blocks = self._copy_inputs(pending.request, pending.batch_size)
        except ShmExhausted:
            return self._shm_short(pending)
        pending.input_ns = time.monotonic_ns() - copying
        lendable = not self.decoupled and bool(descs) and all(
            self._refs.is_held((d[3], d[4])) for d in descs)
        pending.inputs = p.with_inputs(msg, descs, lendable)
        pending.blocks.extend(blocks)
        pending.unstaged = None
        return True

    def _shm_short(self, pending: PendingRequest) -> bool:
        """/dev/shm could not take the request's inputs: it waits for memory the requests
        in flight give back, unless it is larger than /dev/shm or waited SHM_WAIT_S."""
        nbytes = _input_bytes(pending.request)
        capacity = shm_capacity()
        now = asyncio.get_running_loop().time()
        if capacity and nbytes > capacity:
            message = too_large_message(self.name, nbytes, capacity)
        elif not pending.shm_wait_since:
            pending.shm_wait_since = now
            return False
        elif now - pending.shm_wait_since < SHM_WAIT_S:
            return False
        else:
            message = waited_message(self.name, nbytes, SHM_WAIT_S)
        self._log.error("%s", message)
        self.fail(pending, ServerError(ErrorCode.RESOURCE_EXHAUSTED, message))
        return False

    def add_control_tensor(self, pending: PendingRequest, name: str, datatype: str,
                           shape: tuple[int, ...], data: bytes) -> tuple:
        """A tensor the scheduler adds to a request (sequence controls), in the parent's
        pool; its block is freed with the request's inputs. Its descriptor."""
        block = self._refs.copy_in(data)
        pending.blocks.append(block)
        return (name, datatype, shape, block.region, block.offset, block.nbytes)

    def free_blocks(self, blocks: list[Block]) -> None:
        for block in blocks:
            self._refs.drop((block.region, block.offset))


def _input_bytes(request: InferRequest) -> int:
    """The bytes of a request's inputs that go into the parent's pool."""
    return sum([memoryview(t.data).nbytes for t in request.inputs if t.shm is None])
