"""`InferenceTrace`: the trace a request belongs to, passed on to BLS children."""

from __future__ import annotations

from typing import Any


class InferenceTrace:
    """Opaque to models except `get_context()`; the runtime reads `_key`."""

    __slots__ = ("_context", "_key")

    def __init__(self) -> None:
        self._context = ""
        self._key: Any = None

    @classmethod
    def _incoming(cls, context: str = "", key: Any = None) -> InferenceTrace:
        """A trace the server attached to an incoming request (`key` is the runtime's)."""
        trace = cls()
        trace._context = context or ""
        trace._key = key
        return trace

    def get_context(self) -> str | None:
        """The OpenTelemetry context string, or None when the request is not traced."""
        return self._context or None

    def __repr__(self) -> str:
        return f"InferenceTrace(context={self.get_context()!r})"
