"""Triton's error model: a code and a message, mapped to HTTP and gRPC statuses."""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code values, in Triton's numbering."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7
    # pbserve's own (Triton has no such code): shared memory for a request's tensors
    # cannot be had.
    RESOURCE_EXHAUSTED = 8

    @property
    def http_status(self) -> int:
        return _HTTP_STATUS[self]

    @property
    def grpc_status_name(self) -> str:
        """The `grpc.StatusCode` member name for this code."""
        return _GRPC_STATUS[self]

    @property
    def text(self) -> str:
        """The code as tritonserver prints it (TRITONSERVER_ErrorCodeString)."""
        return _TEXT[self]


# As Triton's HTTP frontend: anything not listed otherwise is 400.
_HTTP_STATUS = {
    ErrorCode.UNKNOWN: 400,
    ErrorCode.INTERNAL: 500,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.INVALID_ARG: 400,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED: 501,
    ErrorCode.ALREADY_EXISTS: 400,
    ErrorCode.CANCELLED: 400,
    ErrorCode.RESOURCE_EXHAUSTED: 507,  # Insufficient Storage
}

_GRPC_STATUS = {
    ErrorCode.UNKNOWN: "UNKNOWN",
    ErrorCode.INTERNAL: "INTERNAL",
    ErrorCode.NOT_FOUND: "NOT_FOUND",
    ErrorCode.INVALID_ARG: "INVALID_ARGUMENT",
    ErrorCode.UNAVAILABLE: "UNAVAILABLE",
    ErrorCode.UNSUPPORTED: "UNIMPLEMENTED",
    ErrorCode.ALREADY_EXISTS: "ALREADY_EXISTS",
    ErrorCode.CANCELLED: "CANCELLED",
    ErrorCode.RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED",
}

_TEXT = {
    ErrorCode.UNKNOWN: "Unknown",
    ErrorCode.INTERNAL: "Internal",
    ErrorCode.NOT_FOUND: "Not found",
    ErrorCode.INVALID_ARG: "Invalid argument",
    ErrorCode.UNAVAILABLE: "Unavailable",
    ErrorCode.UNSUPPORTED: "Unsupported",
    ErrorCode.ALREADY_EXISTS: "Already exists",
    ErrorCode.CANCELLED: "Cancelled",
    ErrorCode.RESOURCE_EXHAUSTED: "Resource exhausted",
}


class ServerError(Exception):
    """An error with Triton's meaning; frontends turn it into a status and a body."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message

    def __repr__(self) -> str:
        return f"ServerError({self.code.name}, {self.message!r})"


class MalformedRequest(ServerError):
    """A request that cannot be decoded at all (JSON or protobuf syntax, nesting past
    what a parser takes): INVALID_ARG, and worth a log line, since only a broken or
    hostile client sends one."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_ARG, message)


def invalid_arg(message: str) -> ServerError:
    return ServerError(ErrorCode.INVALID_ARG, message)


def not_found(message: str) -> ServerError:
    return ServerError(ErrorCode.NOT_FOUND, message)


def unavailable(message: str) -> ServerError:
    return ServerError(ErrorCode.UNAVAILABLE, message)


def internal(message: str) -> ServerError:
    return ServerError(ErrorCode.INTERNAL, message)
