"""Scheduling: which queued requests an instance runs next, and when. Triton's default and
dynamic batching scheduler (scheduler), its preserve_ordering reorder buffer (reorder),
the sequence batcher (sequence_batcher) and the rate limiter that holds an instance's
batch until its resources are free (rate_limiter).
"""
