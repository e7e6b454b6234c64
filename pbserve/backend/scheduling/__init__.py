"""Requests on their way to an instance: Triton's default and dynamic batching scheduler
(scheduler), the sequence batcher (sequence_batcher), a request in flight (pending),
waiting while no instance can run (outage), and checking a request against its model's
config before it is queued (validation).
"""
