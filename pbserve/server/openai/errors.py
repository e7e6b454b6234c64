"""OpenAI's error body, and the error that carries it.

A refusal is `{"error": {"message", "type", "param", "code"}}` as OpenAI's API answers
it (the `openai` client reads `error.message`), with a `detail` key beside it holding
the same message: Triton's frontend (FastAPI's HTTPException) answers `{"detail": ...}`
alone, and clients written against it read that. Statuses are Triton's frontend's:
400 for what the client got wrong (an unknown model included), 404 for an unknown
model's /v1/models/{model}, 500 for the server's or the model's failure; an error the
core raises keeps its own code's status (INVALID_ARG 400, UNAVAILABLE 503, ...).
An unexpected exception (a bug) is a 500 logged with its traceback (`request_error`).
"""

from __future__ import annotations

import logging

from pbserve.errors import ServerError
from pbserve.server import jsonio
from pbserve.server.error_log import ErrorLog, error_of
from pbserve.server.http.messages import HttpReply


class OpenAIError(Exception):
    """A request refused with `status` and `message` (OpenAI's error body)."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    @classmethod
    def from_server_error(cls, error: ServerError) -> OpenAIError:
        return cls(error.code.http_status, error.message)


# unexpected exceptions of generation requests: logged with their traceback, rate-limited
_ERRORS = ErrorLog(logging.getLogger("pbserve.openai"))


def request_error(exc: Exception, what: str | None) -> OpenAIError:
    """The error a request that raised `exc` ends with: an OpenAIError as it is, a
    ServerError with its code's status, any other exception (a bug) a 500 naming it,
    logged at error level with its traceback as `what` failed (rate-limited as
    server/error_log.py says; `what` None: not logged, the request logged it already)."""
    if isinstance(exc, OpenAIError):
        return exc
    if what is None:
        return OpenAIError.from_server_error(error_of(exc))
    return OpenAIError.from_server_error(_ERRORS.request_failed(what, exc))


def bad_request(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param)


def error_type(status: int) -> str:
    """OpenAI's `type` for a status."""
    if status == 404:
        return "not_found_error"
    if status == 403:
        return "permission_error"
    return "invalid_request_error" if status < 500 else "server_error"


def error_object(status: int, message: str, param: str | None = None) -> dict:
    """The value of the body's `error` key (also the `error` of a stream's event)."""
    return {"message": message, "type": error_type(status), "param": param,
            "code": str(status)}


def error_reply(error: OpenAIError) -> HttpReply:
    body = {"error": error_object(error.status, error.message, error.param),
            "detail": error.message}
    return HttpReply(error.status, (jsonio.dumps(body),))


def error_event(status: int, message: str) -> bytes:
    """An error in the middle of a stream: one `data:` event, as OpenAI sends it."""
    return b"data: " + jsonio.dumps({"error": error_object(status, message)}) + b"\n\n"
