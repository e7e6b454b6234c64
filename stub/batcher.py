"""A stub's own dynamic batcher: the queue of the requests that frontend processes send
this stub directly for a model with one instance (QUEUED), from which the stub takes
each batch itself when it is free to run one, chosen as the core's batcher chooses
(`choose_batch`, Triton's GetDynamicBatch).

Why (docs/frontend_processes.md, "A batcher in the stub"): through the core, a batched
request crossed one more process each way (frontend -> core -> stub -> frontend, and
the stub's answer back to the core before the next batch could start). Here the
frontend sends the request to the stub, the stub answers the frontend, and the core
sees only what the batches add to the statistics. As in Triton, the batch being formed
grows while the instance runs the one before: what came meanwhile waits in the inbox.

Which models: the core says (Model.direct_route's `batched`,
pbserve/core/scheduling/stub_batching.py): a dynamic batcher with one instance (whose
batches run in order: preserve_ordering holds), no priority levels, no queue policy with
a timeout or a size limit, no inputs whose shapes it compares, a model that is not
decoupled. A request with a timeout or client shared memory still goes through the
core, whose batches the stub runs between its own. Everything here runs on the stub's
main thread.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from backend_utils.error import TritonError
from stub import protocol as p
from stub.batch_choice import choose_batch
from stub.errors import RESCHEDULE_UNSUPPORTED


@dataclass(slots=True)
class Queued:
    """One request waiting: which frontend sent it (its origin), its key and stub
    message (stub/protocol.py request_msg), batch size, and when it came to its frontend
    (`arrived_ns`, for its statistics) and here (`queued_s`, for the queue delay)."""

    origin: int
    key: int
    msg: tuple
    size: int
    arrived_ns: int
    queued_s: float


class StubBatcher:
    """The queue, in arrival order, and the batcher's settings (those of the model's
    `dynamic_batching`, in seconds)."""

    def __init__(self, max_batch: int, preferred: frozenset[int], delay_s: float) -> None:
        self._max_batch = max(max_batch, 1)
        self._preferred = preferred
        self._max_preferred = max(preferred, default=self._max_batch)
        self._delay_s = delay_s
        self._queue: deque[Queued] = deque()

    @classmethod
    def of(cls, config: dict) -> StubBatcher:
        """The batcher of a model config (its JSON form, as `initialize` gets it); one
        that sends each request alone at once without `dynamic_batching` (the core sends
        no QUEUED for such a model: a frontend's stale route may)."""
        batching = config.get("dynamic_batching")
        if batching is None:
            return cls(1, frozenset(), 0.0)
        return cls(int(config.get("max_batch_size", 0)),
                   frozenset(int(s) for s in batching.get("preferred_batch_size", ())),
                   int(batching.get("max_queue_delay_microseconds", 0)) / 1e6)

    @property
    def waiting(self) -> bool:
        """Whether a request waits."""
        return bool(self._queue)

    def add(self, origin: int, key: int, msg: tuple, size: int, arrived_ns: int) -> None:
        self._queue.append(Queued(origin, key, msg, size, arrived_ns, time.monotonic()))

    def next_batch(self, now: float) -> tuple[list[Queued], float]:
        """`(batch, 0.0)`: run this batch now (taken off the queue); `([], wait_s)`: wait
        up to `wait_s` for more requests. `now`: time.monotonic(), or math.inf for
        whatever waits (an unload's)."""
        queue = self._queue
        count, deadline = choose_batch(
            [(q.size, q.queued_s, None) for q in queue], self._preferred,
            self._max_preferred, self._max_batch, self._delay_s, now)
        if count:
            return [queue.popleft() for _ in range(count)], 0.0
        return [], max(deadline - now, 0.0)

    def forget(self, origin: int) -> list[Queued]:
        """Take the requests of `origin` off the queue (its frontend ended)."""
        gone = [q for q in self._queue if q.origin == origin]
        if gone:
            self._queue = deque(q for q in self._queue if q.origin != origin)
        return gone


class BatchCounts:
    """What the batches add to the model's statistics until the core is told
    (stub/protocol.py BATCHES): executions by batch size, and the requests' figures."""

    __slots__ = ("_sizes", "_requests")

    def __init__(self) -> None:
        self._sizes: dict[int, list[int]] = {}  # batch size -> [executions, compute ns]
        # successes, inferences, success ns, queue ns, compute ns, failures, cancelled,
        # failure ns (cancelled requests' too)
        self._requests = [0] * 8

    def __bool__(self) -> bool:
        return bool(self._sizes) or any(self._requests)

    def executed(self, size: int, compute_ns: int) -> None:
        """One batch of `size` (its requests' batch sizes added up) ran `compute_ns`."""
        figures = self._sizes.get(size)
        if figures is None:
            figures = self._sizes[size] = [0, 0]
        figures[0] += 1
        figures[1] += compute_ns

    def succeeded(self, size: int, took_ns: int, queue_ns: int, compute_ns: int) -> None:
        """A request of batch size `size` answered by the model (an error response of
        the model's too, as Triton's Python backend counts it)."""
        figures = self._requests
        figures[0] += 1
        figures[1] += size
        figures[2] += took_ns
        figures[3] += queue_ns
        figures[4] += compute_ns

    def failed(self, took_ns: int, cancelled: bool = False) -> None:
        """A request whose batch failed (or was cancelled before it ran)."""
        figures = self._requests
        figures[6 if cancelled else 5] += 1
        figures[7] += took_ns

    def take(self) -> tuple[tuple, tuple]:
        """((batch size, executions, compute ns) each, the requests' figures) since the
        last take."""
        sizes = tuple((size, *figures) for size, figures in self._sizes.items())
        requests = tuple(self._requests)
        self._sizes.clear()
        self._requests = [0] * 8
        return sizes, requests


def batch_answers(batch: list[Queued], error: str | None, responses: tuple,
                  rescheduled: tuple, dropped: bool, started_ns: int, counts: BatchCounts
                  ) -> dict[int, list[tuple]]:
    """What the stub answers for one of its own batches, by frontend (origin): each
    request's (key, ResponseMsg), from what would be its RESPONSES for a batch of the
    core's (`error`, `responses`, `rescheduled`; or DROPPED's `responses`, `dropped`:
    all were cancelled while they waited); counted in `counts`. A batch whose `execute`
    raised gives each request the error, as the core does (INTERNAL); a request
    released with RESCHEDULE gets the default scheduler's refusal (only a sequence
    batcher takes one back)."""
    now = time.monotonic_ns()
    answers: dict[int, list[tuple]] = {}
    if dropped:
        for q, entry in zip(batch, responses):
            answers.setdefault(q.origin, []).append(entry)
            counts.failed(now - q.arrived_ns, cancelled=True)
        return answers
    counts.executed(sum([q.size for q in batch]), now - started_ns)
    if error is not None:
        record = p.response_record((int(TritonError.INTERNAL), error), (), "{}")
        for q in batch:
            answers.setdefault(q.origin, []).append((q.key, record))
            counts.failed(now - q.arrived_ns)
        return answers
    refused = p.response_record((int(TritonError.INVALID_ARG), RESCHEDULE_UNSUPPORTED),
                                (), "{}")
    for q, (key, msg) in zip(batch, responses):
        if msg is None or key in rescheduled:
            answers.setdefault(q.origin, []).append((key, refused))
            counts.failed(now - q.arrived_ns)
            continue
        answers.setdefault(q.origin, []).append((key, msg))
        counts.succeeded(q.size, now - q.arrived_ns,
                         started_ns - int(q.queued_s * 1e9), now - started_ns)
    return answers
