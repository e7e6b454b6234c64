"""Whether a model's dynamic batcher may run in its stub: frontend processes then send
its requests to the stub's own batcher (stub/batcher.py, QUEUED), and the core sees only
what the batches add to the statistics (docs/frontend_processes.md, "A batcher in the
stub").

Only where the stub's one queue is the batcher Triton's would be: a dynamic batcher
whose choice needs no more than a request's batch size and arrival (no priority levels,
no queue policy with a timeout or a size limit, no inputs whose shapes it compares), a
model that is not decoupled and batches (max_batch_size > 0), served by one instance
(the caller checks the count: Model.direct_route). Everything else keeps the core's
batcher (scheduler.py).
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.config.model_config import is_decoupled
from pbserve.core.scheduling.equal_inputs import EqualInputs


def batches_in_stub(cfg: mc.ModelConfig) -> bool:
    """Whether the model's dynamic batcher may be its stub's (one instance given)."""
    if not cfg.HasField("dynamic_batching") or cfg.HasField("sequence_batching") \
            or cfg.max_batch_size <= 0 or is_decoupled(cfg):
        return False
    batching = cfg.dynamic_batching
    policy = batching.default_queue_policy
    return batching.priority_levels == 0 and not batching.priority_queue_policy \
        and policy.default_timeout_microseconds == 0 and policy.max_queue_size == 0 \
        and not EqualInputs(cfg).needed
