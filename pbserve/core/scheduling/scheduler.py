"""Hands queued requests of one model to its free instances: Triton's default scheduler
and its dynamic batcher (core src/dynamic_batch_scheduler.cc, src/scheduler_utils.cc).

Without `dynamic_batching` every execute call gets one request, first come first served.
With it, an idle instance takes as many queued requests as fit in `max_batch_size`
(sum of their batch dims), choosing the batch as Triton does: the largest
`preferred_batch_size` that the queue makes up is sent at once; otherwise the batcher
waits up to `max_queue_delay_microseconds` (counted from the oldest request of the
batch) for the queue to reach the largest preferred size. A batch holds requests of
equal input shapes (equal_inputs.py): a request that cannot join the forming batch
sends that batch at once and starts the next. Requests queue by priority
level (`priority_levels`, lower is served first; a request's priority 0 or out of
range means `default_priority_level`), each level under its queue policy
(`max_queue_size`, `default_timeout_microseconds`, `allow_timeout_override`,
`timeout_action` REJECT or DELAY: a delayed request is served after the level's
others). With `preserve_ordering` responses leave in the order their requests were
batched: a request's responses wait until every request batched before it is complete.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.instances.instance import ModelInstance
from pbserve.core.pending import PendingRequest
from pbserve.core.scheduling.delay_hooks import delay_hook
from pbserve.core.scheduling.equal_inputs import EqualInputs
from pbserve.core.scheduling.precise_timer import PreciseTimer
from pbserve.core.scheduling.reorder import ReorderBuffer
from pbserve.core.types import InferResponse
from pbserve.errors import ErrorCode, ServerError
from stub.batch_choice import choose_batch
from stub.errors import RESCHEDULE_UNSUPPORTED

TIMEOUT_EXPIRED = "Request timeout expired"
SHM_RETRY_S = 0.005  # /dev/shm was full: dispatching is tried again after this
QUEUE_FULL = "Exceeds maximum queue size"
_UNKNOWN_ID = "<id_unknown>"


def reject(pending: PendingRequest, code: ErrorCode, message: str) -> None:
    """Complete a request that never reaches `execute` with Triton's error."""
    request = pending.request
    pending.deliver(InferResponse(request.model_name, request.model_version, request.id,
                                  error=ServerError(code, message)))


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A ModelQueuePolicy, in seconds."""

    timeout_s: float = 0.0
    allow_override: bool = False
    delay: bool = False  # timeout_action DELAY (else REJECT)
    max_size: int = 0

    @classmethod
    def of(cls, policy: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(policy.default_timeout_microseconds / 1e6, policy.allow_timeout_override,
                   policy.timeout_action == mc.ModelQueuePolicy.DELAY, policy.max_queue_size)

    @property
    def timed(self) -> bool:
        return self.timeout_s > 0


class _Level:
    """One priority level: its queue (request, timeout deadline or 0) and the requests
    whose timeout passed under DELAY."""

    __slots__ = ("delayed", "policy", "queue")

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        self.queue: deque[tuple[PendingRequest, float]] = deque()
        self.delayed: deque[PendingRequest] = deque()

    def __len__(self) -> int:
        return len(self.queue) + len(self.delayed)


class Staging(Protocol):
    """What a scheduler asks of the admission its requests came through (admission.py's
    `Admission`) as they leave its queue."""

    def stage(self, pending: PendingRequest) -> bool:
        """Copy the inputs of a request that waited with them in process memory (the
        default scheduler's) into shm as it is dispatched; False when it cannot go now:
        /dev/shm is full (the request goes back to the front of the queue, and
        dispatching pauses SHM_RETRY_S) or the request failed."""

    def may_wait_ahead(self, pending: PendingRequest) -> bool:
        """Whether the request may wait in a busy stub's queue (not when its inputs are
        too large to hold shm while they wait); asked before it leaves the queue."""

    def add_control_tensor(self, pending: PendingRequest, name: str, datatype: str,
                           shape: tuple[int, ...], data: bytes) -> tuple:
        """A tensor the sequence batcher adds to a request (its controls), in the
        parent's pool, freed with the request's inputs: its descriptor."""


class Scheduler:
    """The default scheduler and the dynamic batcher of one model; `admission` stages
    the requests it dispatches (`Staging`). Its instances tell it when they are idle,
    and what goes back to its queue (instances/events.py `SchedulerEvents`)."""

    def __init__(self, cfg: mc.ModelConfig, admission: Staging) -> None:
        self.instances: list[ModelInstance] = []
        self._admission = admission
        self._shm_timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self._batching = cfg.HasField("dynamic_batching")
        db = cfg.dynamic_batching
        self._max_batch = max(cfg.max_batch_size, 1)
        self._preferred = frozenset(db.preferred_batch_size)
        self._max_preferred = max(self._preferred, default=self._max_batch)
        self._delay_s = db.max_queue_delay_microseconds / 1e6
        equal = EqualInputs(cfg)
        self._equal_inputs = equal if self._batching and equal.needed else None
        self._level_count = db.priority_levels if self._batching else 0
        self._default_level = db.default_priority_level if self._level_count else 0
        self._default_policy = QueuePolicy.of(db.default_queue_policy) if self._batching \
            else QueuePolicy()
        self._levels: dict[int, _Level] = {}
        self._order: list[int] = []  # level numbers, ascending
        for level, policy in db.priority_queue_policy.items():
            self._add_level(level, QueuePolicy.of(policy))
        self._add_level(self._default_level, self._default_policy)
        self._size = 0
        self._next_deadline = math.inf
        # the queue delay's and the queue policies' clock and wake-up (to the microsecond)
        self._timer = PreciseTimer(self._loop, self._on_timer)
        self._dispatch_owed = False  # a dispatch is due at the end of this turn of the loop
        self._ordering = ReorderBuffer() if self._batching and db.preserve_ordering else None
        self._held = delay_hook(cfg.name)  # Triton's test hook: hold until so many queue

    def _add_level(self, level: int, policy: QueuePolicy) -> _Level:
        lv = self._levels[level] = _Level(policy)
        self._order = sorted(self._levels)
        return lv

    def _level_of(self, priority: int) -> int:
        if not self._level_count:
            return 0
        if priority == 0 or priority > self._level_count:
            return self._default_level
        return priority

    # -- the surface admission, the model and its instances use -------------------------
    def submit(self, pending: PendingRequest) -> None:
        if not self._batching and not self._size and not self._held:
            # The common case without a batcher: nothing queued, so the request goes
            # straight to the first idle instance (what queueing then dispatching does).
            for instance in self.instances:
                if instance.ready:
                    if pending.inputs is None and not self._admission.stage(pending):
                        break
                    instance.execute([pending])
                    instance.watch_for_reply()
                    return
            else:
                for instance in self.instances:  # all busy: wait in a stub's queue, if one may
                    if instance.can_queue_another and self._admission.may_wait_ahead(pending):
                        if pending.inputs is None and not self._admission.stage(pending):
                            break
                        instance.execute([pending])
                        return
            if pending.done:  # it can never fit in /dev/shm
                return
            if pending.shm_wait_since:
                self._wait_for_shm()
        request = pending.request
        level = self._level_of(request.priority)
        lv = self._levels.get(level)  # not `or`: an empty level is falsy (len 0)
        if lv is None:
            lv = self._add_level(level, self._default_policy)
        policy = lv.policy
        if policy.max_size and len(lv) >= policy.max_size:
            reject(pending, ErrorCode.UNAVAILABLE,
                   f"[request id: {request.id or _UNKNOWN_ID}] {QUEUE_FULL}")
            return
        deadline = 0.0
        if policy.timed:
            timeout_s = policy.timeout_s
            override_s = request.timeout_us / 1e6
            # Triton lets a request shorten the default timeout, never lengthen it.
            if policy.allow_override and 0 < override_s < timeout_s:
                timeout_s = override_s
            deadline = self._timer.now() + timeout_s
            self._watch(deadline)
        pending.queue_deadline = deadline
        if self._equal_inputs is not None:
            pending.batch_key = self._equal_inputs.key(request)
        lv.queue.append((pending, deadline))
        self._size += 1
        if self._batching and self._delay_s > 0:
            self._dispatch_soon()
        else:
            self.dispatch()

    def _dispatch_soon(self) -> None:
        """A batcher that waits for its batch to fill chooses it once for the requests
        that come in one turn of the loop (a frontend's burst, many connections' requests
        read at once), at its end, not once a request: each choice reads the whole
        queue. (Without a queue delay a request goes at once, as it always did.)"""
        if not self._dispatch_owed:
            self._dispatch_owed = True
            self._loop.call_soon(self._owed_dispatch)

    def _owed_dispatch(self) -> None:
        self._dispatch_owed = False
        self.dispatch()

    def expect_request(self) -> None:
        """A request is on its way: the stub of the idle instance `submit` would hand it
        to gets ready for it (Hop.announce, latency/hop.py)."""
        instance = self._idle_instance()
        if instance is not None:
            instance.hop.announce()

    def takes_now(self) -> bool:
        """Whether `submit` would hand a request to an idle instance at once."""
        return self._idle_instance() is not None

    def _idle_instance(self) -> ModelInstance | None:
        """The idle instance `submit` would hand a request to at once, if any."""
        if self._batching or self._size or self._held:
            return None
        for instance in self.instances:
            if instance.ready:
                return instance
        return None

    def requeue(self, batch: list[PendingRequest]) -> None:
        """Requests that left the queue but did not run (a dead stub's queued batch, or
        /dev/shm could not take their inputs): first in line again, each under the
        queue-policy timeout it was queued with. One whose timeout passed meanwhile is
        rejected with Triton's error, or (DELAY) first of its level's delayed requests."""
        now = self._timer.now()
        for pending in reversed(batch):
            level = self._level_of(pending.request.priority)
            lv = self._levels.get(level)
            if lv is None:
                lv = self._add_level(level, self._default_policy)
            deadline = pending.queue_deadline
            if deadline and now >= deadline:
                if not lv.policy.delay:
                    reject(pending, ErrorCode.UNAVAILABLE, TIMEOUT_EXPIRED)
                    continue
                lv.delayed.appendleft(pending)
            else:
                if deadline:
                    self._watch(deadline)
                lv.queue.appendleft((pending, deadline))
            self._size += 1

    def on_idle(self, instance: ModelInstance) -> None:
        self.dispatch()

    def reschedule(self, pending: PendingRequest) -> None:
        """The model asked for RESCHEDULE: only an iterative sequence batcher can."""
        reject(pending, ErrorCode.INVALID_ARG, RESCHEDULE_UNSUPPORTED)

    def dispatch(self) -> None:
        if self._shm_timer is not None:
            return  # waiting for /dev/shm: _shm_retry dispatches
        if self._held:  # TRITONSERVER_DELAY_SCHEDULER (delay_hooks.py)
            if self._size < self._held:
                return
            self._held = 0
        for instance in self.instances:
            if not self._size:
                return
            if instance.ready:
                batch = self._take_batch()
                if batch is None:
                    return
                batch = self._staged(batch)
                if not batch:
                    return
                if self._ordering is not None:
                    for pending in batch:
                        self._ordering.enter(pending)
                instance.execute(batch)
        if self._batching:  # a batcher forms its batches while the instances are busy
            return
        for instance in self.instances:
            if not self._size:
                return
            if instance.can_queue_another and self._admission.may_wait_ahead(self._head()):
                batch = self._staged([self._pop()])
                if not batch:
                    return
                instance.execute(batch)

    def _staged(self, batch: list[PendingRequest]) -> list[PendingRequest]:
        """The requests of `batch` whose inputs are (now) in shm; the others go back to
        the front of the queue, and if /dev/shm could not take them dispatching waits
        for memory."""
        ready: list[PendingRequest] = []
        waiting: list[PendingRequest] = []
        for pending in batch:
            if waiting or (pending.inputs is None and not self._admission.stage(pending)):
                if not pending.done:
                    waiting.append(pending)
                continue
            ready.append(pending)
        if waiting:
            self.requeue(waiting)
            if waiting[0].shm_wait_since:
                self._wait_for_shm()
        return ready

    def _wait_for_shm(self) -> None:
        if self._shm_timer is None:
            self._shm_timer = self._loop.call_later(SHM_RETRY_S, self._shm_retry)

    def _shm_retry(self) -> None:
        self._shm_timer = None
        self.dispatch()

    def remove(self, pending: PendingRequest) -> bool:
        """Take a request out of the queue (cancelled); False if it is not queued."""
        for lv in self._levels.values():
            for index, (queued, _) in enumerate(lv.queue):
                if queued is pending:
                    del lv.queue[index]
                    self._size -= 1
                    return True
            try:
                lv.delayed.remove(pending)
            except ValueError:
                continue
            self._size -= 1
            return True
        return False

    def take_queued(self) -> list[PendingRequest]:
        """Take every queued request (no instance can run them); the queue goes on."""
        return self.drain()

    def drain(self) -> list[PendingRequest]:
        """Take every queued request (the model is going away)."""
        queued = list(self._in_order())
        for lv in self._levels.values():
            lv.queue.clear()
            lv.delayed.clear()
        self._size = 0
        self._timer.cancel()
        return queued

    def close(self) -> None:
        """The model is unloaded: its timer goes (after `drain`)."""
        self._timer.close()

    # -- batches ------------------------------------------------------------------------
    def _in_order(self) -> Iterator[PendingRequest]:
        for level in self._order:
            lv = self._levels[level]
            for pending, _ in lv.queue:
                yield pending
            yield from lv.delayed

    def _take_batch(self) -> list[PendingRequest] | None:
        if not self._batching:
            return [self._pop()]
        now = self._timer.now()
        if now >= self._next_deadline:
            self._expire(now)
            if not self._size:
                return None
        lone = self._lone_queue()
        items: Iterable = \
            [(p.batch_size, p.arrival_s, p.batch_key) for p, _ in lone] if lone is not None \
            else ((p.batch_size, p.arrival_s, p.batch_key) for p in self._in_order())
        count, wait_until = choose_batch(items, self._preferred, self._max_preferred,
                                         self._max_batch, self._delay_s, now)
        if not count:
            self._arm(wait_until)
            return None
        if lone is not None:
            self._size -= count
            return [lone.popleft()[0] for _ in range(count)]
        return [self._pop() for _ in range(count)]

    def _lone_queue(self) -> deque[tuple[PendingRequest, float]] | None:
        """The whole queue in serving order when it is one level's with nothing delayed
        (the common case: read without the generators of `_in_order` and `_pop`)."""
        if len(self._order) != 1:
            return None
        lv = self._levels[self._order[0]]
        return None if lv.delayed else lv.queue

    def _head(self) -> PendingRequest:
        """The request `_pop` would take, left in the queue."""
        for level in self._order:
            lv = self._levels[level]
            if lv.queue:
                return lv.queue[0][0]
            if lv.delayed:
                return lv.delayed[0]
        raise IndexError("head of an empty scheduler")

    def _pop(self) -> PendingRequest:
        for level in self._order:
            lv = self._levels[level]
            if lv.queue:
                self._size -= 1
                return lv.queue.popleft()[0]
            if lv.delayed:
                self._size -= 1
                return lv.delayed.popleft()
        raise IndexError("pop from an empty scheduler")

    # -- timers -------------------------------------------------------------------------
    def _watch(self, deadline: float) -> None:
        """A queued request's timeout ends at `deadline`: the timer fires by then."""
        if deadline < self._next_deadline:
            self._next_deadline = deadline
            self._arm(deadline)

    def _arm(self, when: float) -> None:
        self._timer.at(when)

    def _on_timer(self) -> None:
        now = self._timer.now()
        if now >= self._next_deadline:
            self._expire(now)
        elif self._next_deadline < math.inf:  # it fired for the queue delay
            self._arm(self._next_deadline)
        self.dispatch()

    def _expire(self, now: float) -> None:
        """Apply the queue policies: a request past its timeout is rejected with Triton's
        error, or (DELAY) moved behind the others of its level."""
        next_deadline = math.inf
        for lv in self._levels.values():
            if not lv.policy.timed or not lv.queue:
                continue
            kept: deque[tuple[PendingRequest, float]] = deque()
            for item in lv.queue:
                deadline = item[1]
                if deadline and now >= deadline:
                    if lv.policy.delay:
                        lv.delayed.append(item[0])
                    else:
                        self._size -= 1
                        reject(item[0], ErrorCode.UNAVAILABLE, TIMEOUT_EXPIRED)
                else:
                    kept.append(item)
                    if deadline and deadline < next_deadline:
                        next_deadline = deadline
            lv.queue = kept
        self._next_deadline = next_deadline
        if next_deadline < math.inf:
            self._arm(next_deadline)

