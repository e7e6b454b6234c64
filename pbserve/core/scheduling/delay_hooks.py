"""Triton's scheduler test hooks, read from the environment when a model's scheduler is
made (core dynamic_batch_scheduler.cc, sequence_batch_scheduler.cc):

- `TRITONSERVER_DELAY_SCHEDULER=N`: the model's dynamic or sequence batcher holds its
  batches until N requests are queued (for a sequence batcher: in the sequence slots of
  all its instances); from then on it runs as usual. Triton's L0_batcher and
  L0_sequence_batcher tests set it so that a batch forms from requests sent one after
  another, whatever the client's timing.
- `TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M`: a sequence batcher held by the first also
  waits until M requests wait in its backlog (sequences without a slot).

pbserve reads them as Triton does, so that those tests run against it. A model's
requests then pass through the core with frontend processes too
(core/model.py `_direct_instances`), where the hold is.
"""

from __future__ import annotations

import logging
import os
import re

DELAY = "TRITONSERVER_DELAY_SCHEDULER"
BACKLOG_DELAY = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"

log = logging.getLogger("pbserve.core")


def held_count(variable: str) -> int:
    """The count `variable` asks for, read as C's atoi (leading digits; 0 when unset,
    not a number or negative: no hold)."""
    match = re.match(r"\s*([+-]?\d+)", os.environ.get(variable, ""))
    return max(int(match.group(1)), 0) if match else 0


def delay_hook(model: str) -> int:
    """TRITONSERVER_DELAY_SCHEDULER's count for a scheduler of `model` (logged, as
    Triton does, when it holds)."""
    count = held_count(DELAY)
    if count:
        log.info("Delaying batcher for %s until %d queued requests...", model, count)
    return count
