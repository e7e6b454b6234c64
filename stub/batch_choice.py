"""`choose_batch`: Triton's choice of a dynamic batch (core src/dynamic_batch_scheduler.cc
GetDynamicBatch), a pure function over the queue. The core's batchers use it
(pbserve/core/scheduling/scheduler.py, sequence_batcher.py), and so does a stub that
batches its frontends' requests itself (stub/batcher.py)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable


def choose_batch(items: Iterable[tuple[int, float, Hashable]], preferred: frozenset[int],
                 max_preferred: int, max_batch: int, delay_s: float, now: float
                 ) -> tuple[int, float]:
    """Triton's GetDynamicBatch over queued `(batch_size, arrival_s, batch_key)` in
    serving order: `(count, 0.0)` to send the first `count` now, or `(0, deadline)` to
    wait until `deadline` (on the caller's clock) for more. The batch ends before the
    first request whose `batch_key` differs from the first one's
    (pbserve/core/scheduling/equal_inputs.py): what is before it is sent now, as when
    `max_batch` is reached."""
    size = count = best = 0
    saturated = False
    oldest = math.inf
    first_key: Hashable = None
    for batch_size, arrival, key in items:
        batch_size = max(1, batch_size)
        if count:
            if size + batch_size > max_preferred and not best:
                best = count
            if size + batch_size > max_batch or key != first_key:
                saturated = True
                break
        else:
            first_key = key
        size += batch_size
        count += 1
        oldest = min(oldest, arrival)
        if size in preferred:
            best = count
    if not count:
        return 0, 0.0
    exceeded = delay_s > 0 and now >= oldest + delay_s  # the deadline returned below
    if best and not exceeded:
        return best, 0.0
    if saturated or size >= max_preferred or exceeded or delay_s <= 0:
        return count, 0.0
    return 0, oldest + delay_s
