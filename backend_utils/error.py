"""Errors a model sees: `TritonError` travels inside a response, `TritonModelException` is raised.

Codes use Triton's TRITONSERVER_Error_Code numbering so a model's
`TritonError(msg, TritonError.NOT_FOUND)` reaches the client as the same
HTTP/gRPC status Triton would give it.
"""

from __future__ import annotations

import enum

from ._strings import as_str


class ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code values (an IntEnum so plain ints compare equal)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    """An error a model puts in an `InferenceResponse` (not an exception, like Triton's)."""

    UNKNOWN = ErrorCode.UNKNOWN
    INTERNAL = ErrorCode.INTERNAL
    NOT_FOUND = ErrorCode.NOT_FOUND
    INVALID_ARG = ErrorCode.INVALID_ARG
    UNAVAILABLE = ErrorCode.UNAVAILABLE
    UNSUPPORTED = ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = ErrorCode.ALREADY_EXISTS
    CANCELLED = ErrorCode.CANCELLED

    __slots__ = ("_message", "_code")

    def __init__(self, message: str, code: int = ErrorCode.INTERNAL) -> None:
        message = as_str("TritonError message", message)
        if isinstance(code, bool) or not isinstance(code, int):
            raise TypeError(f"TritonError code must be a TritonError code, got {code!r}")
        try:
            self._code = ErrorCode(code)
        except ValueError:
            raise TypeError(f"TritonError code must be a TritonError code, got {code!r}") from None
        self._message = message

    def code(self) -> ErrorCode:
        return self._code

    def message(self) -> str:
        return self._message

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, TritonError.{self._code.name})"


class TritonModelException(Exception):
    """Raised on API misuse, and by models to fail initialize/execute/finalize."""

    def message(self) -> str:
        """The text, as older Triton releases exposed it."""
        return str(self)
