"""`PreferredMemory`: where a BLS caller would like the callee's outputs placed."""

from __future__ import annotations

from .constants import MEMORY_DEFAULT, MemoryType

# A set, not `(*MemoryType, ...)` per call: iterating an Enum is slow.
_TYPES = frozenset((*MemoryType, MEMORY_DEFAULT))


class PreferredMemory:
    """`PreferredMemory(preferred_memory_type, preferred_device_id=0)`.

    The type is `TRITONSERVER_MEMORY_GPU` or `TRITONSERVER_MEMORY_CPU`; the default
    instance a BLS request gets means "wherever the callee put them".
    """

    __slots__ = ("_type", "_device_id")

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        if isinstance(preferred_memory_type, bool) or not isinstance(preferred_memory_type, int):
            raise TypeError(
                "preferred_memory_type must be TRITONSERVER_MEMORY_GPU or "
                f"TRITONSERVER_MEMORY_CPU, got {preferred_memory_type!r}"
            )
        if preferred_memory_type not in _TYPES:
            raise TypeError(
                "preferred_memory_type must be TRITONSERVER_MEMORY_GPU or "
                f"TRITONSERVER_MEMORY_CPU, got {preferred_memory_type!r}"
            )
        if isinstance(preferred_device_id, bool) or not isinstance(preferred_device_id, int):
            raise TypeError(f"preferred_device_id must be an int, got {preferred_device_id!r}")
        self._type = int(preferred_memory_type)
        self._device_id = preferred_device_id

    @classmethod
    def _default(cls) -> PreferredMemory:
        """The "no preference" instance every request gets, built without re-validating."""
        memory = cls.__new__(cls)
        memory._type = MEMORY_DEFAULT
        memory._device_id = 0
        return memory

    @property
    def preferred_memory_type(self) -> int:
        """0 GPU, 1 CPU, 2 no preference (read by the runtime)."""
        return self._type

    @property
    def preferred_device_id(self) -> int:
        return self._device_id

    def __repr__(self) -> str:
        kind = {0: "GPU", 1: "CPU"}.get(self._type, "DEFAULT")
        return f"PreferredMemory({kind}, {self._device_id})"
