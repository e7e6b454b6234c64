"""Scheduling: which queued requests an instance runs next, and when. A model's requests
come in through its admission (admission), which makes its scheduler: Triton's default and
dynamic batching scheduler (scheduler), its preserve_ordering reorder buffer (reorder),
the sequence batcher (sequence_batcher) and the rate limiter that holds an instance's
batch until its resources are free (rate_limiter).
"""
