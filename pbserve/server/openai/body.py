"""A request's JSON body, and its fields read with their types checked: a field of the
wrong type is a 400 naming it (FastAPI's schema check in Triton's frontend)."""

from __future__ import annotations

from typing import Any

from pbserve.errors import ServerError
from pbserve.server.http import codec
from pbserve.server.http.compression import decompress_body
from pbserve.server.http.messages import HttpRequest
from pbserve.server.openai.errors import OpenAIError, bad_request

_MISSING = object()


def json_body(request: HttpRequest, max_input: int) -> Body:
    """The request's body as a JSON object (a 400 for anything else)."""
    try:
        data = decompress_body(request.headers.get(b"content-encoding"), request.body,
                               max_input)
        value = codec.parse_json(data, "request") if data else None
    except ServerError as exc:
        raise OpenAIError.from_server_error(exc) from None
    if not isinstance(value, dict):
        raise bad_request("the request body must be a JSON object")
    return Body(value)


def _type_name(value: Any) -> str:
    return type(value).__name__ if value is not None else "null"


class Body:
    """The fields of a JSON request body. Each getter returns the field's value, or
    `default` when it is absent or null, and refuses a value of another type."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields

    def has(self, name: str) -> bool:
        return self.fields.get(name) is not None

    def raw(self, name: str, default: Any = None) -> Any:
        value = self.fields.get(name)
        return default if value is None else value

    def _get(self, name: str, required: bool) -> Any:
        value = self.fields.get(name)
        if value is None:
            if required:
                raise bad_request(f"'{name}' is a required field", name)
            return _MISSING
        return value

    def _typed(self, name: str, kinds: type | tuple[type, ...], what: str,
               required: bool = False) -> Any:
        """The field's value (_MISSING when absent or null); a 400 naming `what` it
        must be when it is not one of `kinds` (a boolean is no number)."""
        value = self._get(name, required)
        if value is not _MISSING and (not isinstance(value, kinds) or (
                isinstance(value, bool) and kinds is not bool)):
            raise bad_request(f"'{name}' must be {what}, not {_type_name(value)}", name)
        return value

    def string(self, name: str, default: str | None = None, required: bool = False
               ) -> str | None:
        value = self._typed(name, str, "a string", required)
        return default if value is _MISSING else value

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self._typed(name, bool, "a boolean")
        return default if value is _MISSING else value

    def integer(self, name: str, default: int | None = None, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        value = self._typed(name, int, "an integer")
        if value is _MISSING:
            return default
        _check_bounds(name, value, minimum, maximum)
        return value

    def number(self, name: str, minimum: float | None = None,
               maximum: float | None = None) -> float | None:
        value = self._typed(name, (int, float), "a number")
        if value is _MISSING:
            return None
        _check_bounds(name, value, minimum, maximum)
        return float(value)

    def strings(self, name: str) -> list[str] | None:
        """A string or a list of strings (`stop`), as a list."""
        value = self._get(name, False)
        if value is _MISSING:
            return None
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise bad_request(f"'{name}' must be a string or a list of strings", name)

    def mapping(self, name: str) -> dict[str, Any] | None:
        value = self._typed(name, dict, "an object")
        return None if value is _MISSING else value

    def array(self, name: str) -> list | None:
        value = self._typed(name, list, "an array")
        return None if value is _MISSING else value


def _check_bounds(name: str, value: float, minimum: float | None,
                  maximum: float | None) -> None:
    if (minimum is not None and value < minimum) or \
            (maximum is not None and value > maximum):
        raise bad_request(f"'{name}' must be {_bounds(minimum, maximum)}, got {value}", name)


def _bounds(minimum: float | None, maximum: float | None) -> str:
    if maximum is None:
        return f"at least {minimum:g}"
    if minimum is None:
        return f"at most {maximum:g}"
    return f"between {minimum:g} and {maximum:g}"
