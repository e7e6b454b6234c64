"""TRITONSERVER_* constants models pass around, with Triton's values.

Named once here; every other module imports them from this file.
"""

from __future__ import annotations

import enum

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class MemoryType(enum.IntEnum):
    """Where BLS outputs should be placed (Triton's PreferredMemory::MemoryType)."""

    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU

# Triton's third, unexported MemoryType value: "wherever the callee put it".
MEMORY_DEFAULT = 2
