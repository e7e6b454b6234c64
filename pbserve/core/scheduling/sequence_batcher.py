"""Triton's sequence batcher (core src/sequence_batch_scheduler/): requests that carry a
correlation id run, in order, on the instance whose sequence slot their sequence holds.

- Slots: every instance has `max(1, max_batch_size)` of them (`direct`), or
  `max_candidate_sequences` (`oldest`). A START takes a free slot (lowest slot number
  first, so sequences spread over the instances); when none is free the sequence waits
  in the backlog, in arrival order, for the next slot to be released. A slot is released
  once its sequence's last request (END) has run, or when the sequence is ended early.
- Batches: an idle instance runs the next request of each of its slots' sequences
  together, one per sequence, if their inputs may share a batch (Triton's
  RequiredEqualInputs, equal_inputs.py: the first ready slot's shapes; the others wait
  for a later batch). `direct` takes them all (waiting up to its
  `max_queue_delay_microseconds` while fewer than `minimum_slot_utilization` of the
  slots are ready); `oldest` takes the oldest up to `max_batch_size`, waiting for a
  `preferred_batch_size` as the dynamic batcher does.
- Controls: every request gets the configured `control_input` tensors as extra inputs,
  as Triton sets them: START / END from the request's flags, READY true, CORRID the
  correlation id in its `data_type`; shape [1], or [1, 1] when the model batches.
- Ends without END: a sequence idle for `max_sequence_idle_microseconds`, one whose
  request was cancelled or timed out (its queued requests are cancelled too, as Triton
  does), and every live sequence at unload. The instance that held it then gets
  pbserve's eviction notice: the model's optional `sequence_terminated(correlation_id,
  reason)` with "idle_timeout", "client_gone" or "unload" (Triton has no such call).
- `iterative_sequence`: a request without a correlation id gets one (and START); the
  model may release it with RESCHEDULE, which queues it again (flags 0) in its slot; the
  sequence ends when a request is released without it.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import struct
from collections import deque

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.instances.instance import ModelInstance
from pbserve.core.config.model_config import datatype_of
from pbserve.core.pending import PendingRequest
from pbserve.core.scheduling.delay_hooks import BACKLOG_DELAY, delay_hook, held_count
from pbserve.core.scheduling.equal_inputs import EqualInputs
from pbserve.core.scheduling.precise_timer import PreciseTimer
from pbserve.core.scheduling.scheduler import RESCHEDULE_UNSUPPORTED, Staging, reject
from pbserve.core.types import FLAG_SEQUENCE_END, FLAG_SEQUENCE_START
from pbserve.errors import ErrorCode
from stub import protocol as p
from stub.batch_choice import choose_batch

log = logging.getLogger("pbserve.core")

IDLE_TIMEOUT = "idle_timeout"
CLIENT_GONE = "client_gone"
UNLOAD = "unload"
_ENDED = "end"  # the sequence's END has been queued, or an iterative request finished
SEQUENCE_IDLE_DEFAULT_US = 1_000_000
BACKLOG_RECHECK_S = 0.05  # Triton's reaper revisits an idle backlogged sequence so often
_Control = mc.ModelSequenceBatching.Control
_BOOL_FORMATS = (("int32_false_true", "INT32", "<i"), ("fp32_false_true", "FP32", "<f"),
                 ("bool_false_true", "BOOL", "<?"))
_CORRID_FORMATS = {mc.TYPE_UINT64: "<Q", mc.TYPE_INT64: "<Q", mc.TYPE_UINT32: "<I",
                   mc.TYPE_INT32: "<I"}
_LENGTH = struct.Struct("<I")


class _Sequence:
    """One sequence: its queued requests, its slot (None while in the backlog)."""

    __slots__ = ("corrid", "ended", "queue", "running", "seen", "slot")

    def __init__(self, corrid: int | str) -> None:
        self.corrid = corrid
        self.queue: deque[_Entry] = deque()
        self.slot: _Slot | None = None
        self.seen = False  # a request of it reached the model
        self.running = 0  # requests of it in the instance's current batch
        self.ended: str | None = None  # _ENDED or the reason it ended early


class _Slot:
    __slots__ = ("index", "instance", "order", "seq")

    def __init__(self, instance: ModelInstance, index: int, order: int) -> None:
        self.instance = instance
        self.index = index
        self.order = order
        self.seq: _Sequence | None = None

    def __lt__(self, other: _Slot) -> bool:
        return (self.index, self.order) < (other.index, other.order)


class _Entry:
    """A request in the batcher: its sequence, its flags as the model sees them, and
    the control tensors made for it (by flags: a rescheduled request reuses them)."""

    __slots__ = (
        "controls",
        "corrid",
        "flags",
        "message",
        "pending",
        "queued_s",
        "rescheduled",
        "seq",
    )

    def __init__(self, pending: PendingRequest, corrid: int | str, flags: int,
                 now: float) -> None:
        self.pending = pending
        self.seq: _Sequence | None = None
        self.corrid = corrid
        self.flags = flags
        self.queued_s = now
        self.controls: dict[int, tuple] = {}
        self.rescheduled = False
        self.message = pending.inputs  # the request message as admission made it


class SequenceBatcher:
    """The sequence batcher of one model; `admission` makes the control tensors it adds
    to requests (`Staging`). Its instances tell it when they are idle, and what goes
    back to its queue (instances/events.py `SchedulerEvents`)."""

    def __init__(self, cfg: mc.ModelConfig, admission: Staging) -> None:
        sb = cfg.sequence_batching
        self._name = cfg.name
        self._admission = admission
        self._loop = asyncio.get_running_loop()
        self._iterative = sb.iterative_sequence
        self._oldest = sb.HasField("oldest")
        self._max_batch = max(cfg.max_batch_size, 1)
        if self._oldest:
            self._slot_count = sb.oldest.max_candidate_sequences or self._max_batch
            self._preferred = frozenset(sb.oldest.preferred_batch_size)
            self._delay_s = sb.oldest.max_queue_delay_microseconds / 1e6
            self._utilization = 0.0
        else:
            self._slot_count = self._max_batch
            self._preferred = frozenset()
            self._delay_s = sb.direct.max_queue_delay_microseconds / 1e6
            self._utilization = sb.direct.minimum_slot_utilization
        self._max_preferred = max(self._preferred, default=self._max_batch)
        self._idle_s = (sb.max_sequence_idle_microseconds or SEQUENCE_IDLE_DEFAULT_US) / 1e6
        self._shape = (1, 1) if cfg.max_batch_size > 0 else (1,)
        self._start_control = _boolean_control(sb, _Control.CONTROL_SEQUENCE_START)
        self._end_control = _boolean_control(sb, _Control.CONTROL_SEQUENCE_END)
        self._ready_control = _boolean_control(sb, _Control.CONTROL_SEQUENCE_READY)
        self._corrid_control = _corrid_control(sb)
        equal = EqualInputs(cfg)
        self._equal_inputs = equal if equal.needed else None
        self._instances: list[ModelInstance] = []
        self._slots: dict[ModelInstance, list[_Slot]] = {}
        self._free: list[_Slot] = []  # a heap
        self._active: dict[int | str, _Sequence] = {}  # sequences that take requests
        self._last_seen: dict[int | str, float] = {}
        self._backlog: deque[_Sequence] = deque()
        self._entries: dict[int, _Entry] = {}  # by request key: queued or running
        self._running: dict[ModelInstance, list[_Entry]] = {}
        self._next_corrid = 1  # iterative_sequence's own ids, as Triton counts them
        self._reaper: asyncio.TimerHandle | None = None
        # the batch delay's clock and wake-up, to the microsecond (precise_timer.py)
        self._timer = PreciseTimer(self._loop, self._on_timer)
        self._closed = False
        # Triton's test hooks (delay_hooks.py): hold until so many requests are queued
        self._held = delay_hook(cfg.name)
        self._backlog_held = held_count(BACKLOG_DELAY) if self._held else 0

    @property
    def instances(self) -> list[ModelInstance]:
        return self._instances

    @instances.setter
    def instances(self, instances: list[ModelInstance]) -> None:
        """The instances are known: give each its sequence slots."""
        self._instances = instances
        self._slots = {i: [_Slot(i, n, order) for n in range(self._slot_count)]
                       for order, i in enumerate(instances)}
        self._free = [slot for slots in self._slots.values() for slot in slots]
        heapq.heapify(self._free)

    # -- the surface admission, the model and its instances use -------------------------
    def expect_request(self) -> None:
        """Nothing is got ready: which instance takes a request depends on its
        sequence, known only once it is decoded."""

    def submit(self, pending: PendingRequest) -> None:
        request = pending.request
        if self._closed:
            reject(pending, ErrorCode.UNAVAILABLE, "Server is stopping, scheduler for model "
                   "has stopped accepting new inference requests")
            return
        if pending.batch_size > 1:
            reject(pending, ErrorCode.INVALID_ARG,
                   f"inference request to model '{self._name}' must specify batch-size 1 "
                   "due to requirements of sequence batcher")
            return
        corrid = request.correlation_id
        flags = request.flags & (FLAG_SEQUENCE_START | FLAG_SEQUENCE_END)
        if corrid == 0 or corrid == "":
            if not self._iterative:
                reject(pending, ErrorCode.INVALID_ARG,
                       f"inference request to model '{self._name}' must specify a non-zero "
                       "or non-empty correlation ID")
                return
            corrid, flags = self._next_corrid, FLAG_SEQUENCE_START
            self._next_corrid += 1
        if self._equal_inputs is not None:
            pending.batch_key = self._equal_inputs.key(request)
        entry = _Entry(pending, corrid, flags, self._timer.now())
        if self._enqueue(entry):
            self.dispatch()

    def on_idle(self, instance: ModelInstance) -> None:
        """The instance's batch is done (its rescheduled requests are queued again)."""
        entries = self._running.pop(instance, None)
        if entries:
            for entry in entries:
                self._completed(entry)
        self.dispatch()

    def requeue(self, batch: list[PendingRequest]) -> None:
        """Requests that left their slots but never ran: a batch staged under the rate
        limiter whose stub died first. They fail UNAVAILABLE, as the requests of a
        crashed stub do (their sequences do not go on past a lost request); the slots are
        given back when the instance is idle again (`on_idle`)."""
        for pending in batch:
            reject(pending, ErrorCode.UNAVAILABLE,
                   f"model '{self._name}': the instance stopped before the request ran")

    def reschedule(self, pending: PendingRequest) -> None:
        """RESCHEDULE: the request runs again in its sequence (iterative_sequence only)."""
        entry = self._entries.get(pending.key)
        if entry is None or not self._iterative or entry.flags & FLAG_SEQUENCE_END:
            reject(pending, ErrorCode.INVALID_ARG, RESCHEDULE_UNSUPPORTED)
            return
        if self._closed:
            reject(pending, ErrorCode.UNAVAILABLE, f"model '{self._name}' is being unloaded")
            return
        if pending.cancelled:
            reject(pending, ErrorCode.CANCELLED,
                   f"request for model '{self._name}' was cancelled")
            return
        entry.flags = 0  # Triton: neither START nor END
        entry.queued_s = self._timer.now()
        # Refused (its sequence ended meanwhile): it completes, as a final request does.
        entry.rescheduled = self._enqueue(entry)

    def dispatch(self) -> None:
        if self._held and self._holding():
            return
        for instance in self._instances:
            if instance.ready:
                entries = self._take(instance)
                if entries:
                    self._run(instance, entries)

    def _holding(self) -> bool:
        """Whether the test hooks still hold every batch: fewer than TRITONSERVER_DELAY_
        SCHEDULER requests in the slots, or fewer than TRITONSERVER_BACKLOG_DELAY_SCHEDULER
        in the backlog (as Triton's DelayScheduler counts them)."""
        queued = sum(len(slot.seq.queue) for slots in self._slots.values() for slot in slots
                     if slot.seq is not None)
        backlog = sum(len(seq.queue) for seq in self._backlog)
        if queued < self._held or backlog < self._backlog_held:
            return True
        self._held = self._backlog_held = 0
        return False

    def remove(self, pending: PendingRequest) -> bool:
        """A queued request was cancelled (or timed out): Triton ends its sequence and
        cancels the sequence's other queued requests. False if it is not queued."""
        entry = self._entries.get(pending.key)
        seq = entry.seq if entry is not None else None
        if seq is None or entry not in seq.queue:
            return False
        seq.queue.remove(entry)
        del self._entries[pending.key]
        self._end(seq, CLIENT_GONE)
        self._release_if_done(seq)
        self.dispatch()
        return True

    def take_queued(self) -> list[PendingRequest]:
        """Take every queued request (no instance can run them): their sequences end, as
        when a client is gone, and their slots go to the next; the batcher goes on."""
        taken: list[PendingRequest] = []
        sequences = [slot.seq for slots in self._slots.values() for slot in slots
                     if slot.seq is not None]
        for seq in sequences + list(self._backlog):
            if not seq.queue:
                continue
            for entry in seq.queue:
                self._entries.pop(entry.pending.key, None)
                taken.append(entry.pending)
            seq.queue.clear()
            self._end(seq, CLIENT_GONE)
            self._release_if_done(seq)
        return taken

    def drain(self) -> list[PendingRequest]:
        """The model is going away: every queued request, and the eviction notice
        ("unload") for each live sequence its instance has seen."""
        self._closed = True
        self._timer.cancel()
        if self._reaper is not None:
            self._reaper.cancel()
        self._reaper = None
        queued: list[PendingRequest] = []
        sequences = [slot.seq for slots in self._slots.values() for slot in slots
                     if slot.seq is not None]
        for seq in sequences + list(self._backlog):
            queued.extend(entry.pending for entry in seq.queue)
            for entry in seq.queue:
                self._entries.pop(entry.pending.key, None)
            seq.queue.clear()
            if seq.slot is not None:
                self._vacate(seq, seq.ended or UNLOAD)
        self._backlog.clear()
        self._active.clear()
        self._last_seen.clear()
        return queued

    # -- sequences ----------------------------------------------------------------------
    def _enqueue(self, entry: _Entry) -> bool:
        """Put a request in its sequence (Triton's SequenceBatchScheduler::Enqueue);
        False when it is refused (it then has its error)."""
        corrid, flags = entry.corrid, entry.flags
        seq = self._active.get(corrid)
        if seq is None and not flags & FLAG_SEQUENCE_START:
            reject(entry.pending, ErrorCode.INVALID_ARG,
                   f"inference request for sequence {corrid} to model '{self._name}' must "
                   "specify the START flag on the first request of the sequence")
            return False
        self._last_seen[corrid] = entry.queued_s
        if self._reaper is None:
            self._reaper = self._loop.call_later(self._idle_s, self._reap)
        if seq is None:
            seq = _Sequence(corrid)
            if self._free:
                slot = heapq.heappop(self._free)
                slot.seq, seq.slot = seq, slot
            else:
                self._backlog.append(seq)
            if flags & FLAG_SEQUENCE_END:
                seq.ended = _ENDED
            else:
                self._active[corrid] = seq
        else:
            if flags & FLAG_SEQUENCE_START:
                log.warning("sequence %s for model '%s' has a conflict. The previous sequence "
                            "did not end before this sequence start. Previous sequence will "
                            "be terminated early.", corrid, self._name)
            if flags & FLAG_SEQUENCE_END:
                self._end(seq, _ENDED)
        entry.seq = seq
        seq.queue.append(entry)
        self._entries[entry.pending.key] = entry
        return True

    def _end(self, seq: _Sequence, how: str) -> None:
        """No more requests join `seq`. When its client is gone, what it has queued is
        cancelled (Triton); after an idle timeout, what it has queued still runs."""
        if self._active.get(seq.corrid) is seq:
            del self._active[seq.corrid]
            self._last_seen.pop(seq.corrid, None)
        if how == _ENDED:
            seq.ended = seq.ended or _ENDED
            return
        if seq.ended in (None, _ENDED):
            seq.ended = how
        while how == CLIENT_GONE and seq.queue:
            entry = seq.queue.popleft()
            self._entries.pop(entry.pending.key, None)
            reject(entry.pending, ErrorCode.CANCELLED,
                   f"request for model '{self._name}' was cancelled")

    def _release_if_done(self, seq: _Sequence) -> None:
        """Give the slot of an ended sequence to the next one, once nothing of it is
        queued or running; the model hears of an early end."""
        if seq.slot is None or seq.ended is None or seq.queue or seq.running:
            return
        slot = self._vacate(seq, seq.ended)
        while self._backlog:
            waiting = self._backlog.popleft()
            if waiting.queue:
                slot.seq, waiting.slot = waiting, slot
                return
        heapq.heappush(self._free, slot)

    def _vacate(self, seq: _Sequence, how: str) -> _Slot:
        """Take `seq` off its slot; the model hears of an end without END."""
        slot = seq.slot
        slot.seq = seq.slot = None
        if seq.seen and how != _ENDED:
            slot.instance.sequence_terminated(seq.corrid, how)
        return slot

    def _completed(self, entry: _Entry) -> None:
        seq = entry.seq
        seq.running -= 1
        if entry.rescheduled:  # already queued again
            entry.rescheduled = False
            return
        self._entries.pop(entry.pending.key, None)
        if entry.pending.cancelled and not entry.flags & FLAG_SEQUENCE_END:
            self._end(seq, CLIENT_GONE)
        elif self._iterative:
            self._end(seq, _ENDED)
        self._release_if_done(seq)

    def _reap(self) -> None:
        """Triton's reaper: a sequence without a request for `max_sequence_idle` ends."""
        self._reaper = None
        now = self._loop.time()
        wait = math.inf
        for corrid, seen in list(self._last_seen.items()):
            left = seen + self._idle_s - now
            if left > 0:
                wait = min(wait, left)
                continue
            seq = self._active.get(corrid)
            if seq is None:
                del self._last_seen[corrid]
            elif seq.slot is None:
                wait = min(wait, BACKLOG_RECHECK_S)
            else:
                log.debug("model '%s': sequence %s idle for %.3f s, ending it", self._name,
                          corrid, self._idle_s)
                self._end(seq, IDLE_TIMEOUT)
                self._release_if_done(seq)
        if wait < math.inf:
            self._reaper = self._loop.call_later(wait, self._reap)
        self.dispatch()

    # -- batches ------------------------------------------------------------------------
    def _take(self, instance: ModelInstance) -> list[_Entry] | None:
        candidates = [slot.seq.queue[0] for slot in self._slots.get(instance, ())
                      if slot.seq is not None and slot.seq.queue]
        if not candidates:
            return None
        now = self._timer.now()
        if self._oldest:
            candidates.sort(key=lambda e: e.queued_s)
            count, wait_until = choose_batch(
                ((1, e.queued_s, e.pending.batch_key) for e in candidates), self._preferred,
                self._max_preferred, self._max_batch, self._delay_s, now)
            if not count:
                self._arm(wait_until)
                return None
            return candidates[:count]
        if self._equal_inputs is not None:  # in slot order: the first one's shapes
            key = candidates[0].pending.batch_key
            candidates = [e for e in candidates if e.pending.batch_key == key]
        if self._delay_s > 0 and self._utilization > 0 \
                and len(candidates) / self._max_batch < self._utilization:
            oldest = min(e.queued_s for e in candidates)
            if now < oldest + self._delay_s:  # as the deadline armed below
                self._arm(oldest + self._delay_s)
                return None
        return candidates

    def _run(self, instance: ModelInstance, entries: list[_Entry]) -> None:
        batch: list[PendingRequest] = []
        running: list[_Entry] = []
        for entry in entries:
            seq = entry.seq
            seq.queue.popleft()
            pending = entry.pending
            try:
                pending.inputs = self._message(entry)
            except Exception as exc:  # noqa: BLE001 - shm exhausted: this request fails
                self._entries.pop(pending.key, None)
                reject(pending, ErrorCode.INTERNAL,
                       f"failed to allocate sequence control signal in CPU memory: {exc}")
                self._release_if_done(seq)
                continue
            seq.seen = True
            seq.running += 1
            batch.append(pending)
            running.append(entry)
        if batch:
            self._running[instance] = running
            instance.execute(batch)

    def _message(self, entry: _Entry) -> tuple:
        """The request message with the model's view of flags, correlation id and the
        control tensors."""
        message, flags = entry.message, entry.flags
        controls = entry.controls.get(flags)
        if controls is None:
            controls = entry.controls[flags] = self._controls(entry)
        return p.in_sequence(message, entry.corrid, flags, controls)

    def _controls(self, entry: _Entry) -> tuple:
        """START, END, READY, CORRID, as Triton's SetControlTensors fills them."""
        made = []
        admission, pending, shape = self._admission, entry.pending, self._shape
        for control, value in ((self._start_control, entry.flags & FLAG_SEQUENCE_START),
                               (self._end_control, entry.flags & FLAG_SEQUENCE_END),
                               (self._ready_control, True)):
            if control is not None:
                name, datatype, false, true = control
                made.append(admission.add_control_tensor(pending, name, datatype, shape,
                                                         true if value else false))
        if self._corrid_control is not None:
            name, datatype, fmt = self._corrid_control
            corrid = entry.corrid
            if fmt is None:  # STRING: Triton's length-prefixed bytes ("" for a number)
                text = corrid.encode() if isinstance(corrid, str) else b""
                data = _LENGTH.pack(len(text)) + text
            else:
                value = corrid if isinstance(corrid, int) else 0
                data = struct.pack(fmt, value & (0xFFFFFFFFFFFFFFFF if fmt == "<Q"
                                                 else 0xFFFFFFFF))
            made.append(admission.add_control_tensor(pending, name, datatype, shape, data))
        return tuple(made)

    def close(self) -> None:
        """The model is unloaded: its timer goes (after `drain`)."""
        self._timer.close()

    def _arm(self, when: float) -> None:
        self._timer.at(when)

    def _on_timer(self) -> None:
        self.dispatch()


def _boolean_control(sb: mc.ModelSequenceBatching, kind: int
                     ) -> tuple[str, str, bytes, bytes] | None:
    """(tensor, datatype, false bytes, true bytes) of a START/END/READY control."""
    for control_input in sb.control_input:
        for control in control_input.control:
            if control.kind != kind:
                continue
            for field, datatype, fmt in _BOOL_FORMATS:
                values = getattr(control, field)
                if len(values) == 2:
                    return (control_input.name, datatype, struct.pack(fmt, values[0]),
                            struct.pack(fmt, values[1]))
    return None


def _corrid_control(sb: mc.ModelSequenceBatching) -> tuple[str, str, str | None] | None:
    """(tensor, datatype, struct format or None for STRING) of the CORRID control."""
    for control_input in sb.control_input:
        for control in control_input.control:
            if control.kind == _Control.CONTROL_SEQUENCE_CORRID:
                return (control_input.name, datatype_of(control.data_type),
                        _CORRID_FORMATS.get(control.data_type))
    return None
