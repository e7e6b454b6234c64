"""Scheduling: which queued requests an instance runs next. Triton's default and dynamic
batching scheduler (scheduler), its preserve_ordering reorder buffer (reorder) and the
sequence batcher (sequence_batcher).
"""
