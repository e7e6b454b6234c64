"""Scheduling: which queued requests an instance runs next. Triton's default and dynamic
batching scheduler (scheduler) and the sequence batcher (sequence_batcher).
"""
