"""Shared-memory primitives: named regions, a growable pool, message queues, tensor layout."""

from shm.names import new_prefix, sweep_dead_owners, unlink_prefix
from shm.pool import Block, Pool, RegionMap, ShmExhausted
from shm.queue import MessageQueue, QueueClosed, QueueFull
from shm.region import Region
from shm.tensor import TensorDesc

__all__ = [
    "Block", "MessageQueue", "Pool", "QueueClosed", "QueueFull", "Region", "RegionMap",
    "ShmExhausted", "TensorDesc", "new_prefix", "sweep_dead_owners", "unlink_prefix",
]
