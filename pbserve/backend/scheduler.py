"""Hands queued requests of one model to its free instances.

Without `dynamic_batching` every execute call gets one request, as Triton's default
scheduler does. With it, an idle instance takes as many queued requests as fit in
`max_batch_size` (sum of their batch dims), waiting up to `max_queue_delay_microseconds`
for more while the batch is smaller than the preferred size.
"""

from __future__ import annotations

import asyncio
from collections import deque

from pbserve.backend.instance import ModelInstance
from pbserve.backend.pending import PendingRequest
from tritonclient.grpc import model_config_pb2 as mc


class Scheduler:
    def __init__(self, cfg: mc.ModelConfig) -> None:
        self.instances: list[ModelInstance] = []
        self._queue: deque[PendingRequest] = deque()
        self._batching = cfg.HasField("dynamic_batching") and cfg.max_batch_size > 0
        self._max_batch = max(cfg.max_batch_size, 1)
        preferred = list(cfg.dynamic_batching.preferred_batch_size) if self._batching else []
        self._preferred = max(preferred) if preferred else self._max_batch
        self._delay_s = cfg.dynamic_batching.max_queue_delay_microseconds / 1e6
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    @property
    def queued(self) -> int:
        return len(self._queue)

    def submit(self, pending: PendingRequest) -> None:
        self._queue.append(pending)
        self.dispatch()

    def on_idle(self, instance: ModelInstance) -> None:
        self.dispatch()

    def dispatch(self) -> None:
        queue = self._queue
        if not queue:
            return
        for instance in self.instances:
            if not queue:
                return
            if instance.ready:
                batch = self._take_batch()
                if batch is None:
                    return
                instance.execute(batch)

    def _take_batch(self) -> list[PendingRequest] | None:
        queue = self._queue
        if not self._batching:
            return [queue.popleft()]
        size = 0
        count = 0
        for pending in queue:
            if size + pending.batch_size > self._max_batch and count:
                break
            size += pending.batch_size
            count += 1
        if size < self._preferred and self._delay_s > 0 and count == len(queue):
            deadline = queue[0].arrival_s + self._delay_s
            if self._loop.time() < deadline:
                if self._timer is None:
                    self._timer = self._loop.call_at(deadline, self._on_timer)
                return None
        return [queue.popleft() for _ in range(count)]

    def _on_timer(self) -> None:
        self._timer = None
        self.dispatch()

    def remove(self, pending: PendingRequest) -> bool:
        """Take a request out of the queue (cancelled); False if it is not queued."""
        try:
            self._queue.remove(pending)
        except ValueError:
            return False
        return True

    def drain(self) -> list[PendingRequest]:
        """Take every queued request (the model is going away)."""
        queued = list(self._queue)
        self._queue.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return queued
