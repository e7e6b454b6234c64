"""The model repository extension over HTTP: index, load, unload.

Bodies are optional JSON objects, as in Triton:
    index:  {"ready": bool}
    load:   {"parameters": {"config": "<JSON>", "file:<path>": "<base64>"}}
    unload: {"parameters": {"unload_dependents": bool}}
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import unquote

from pbserve.core.api import InferenceCore
from pbserve.errors import ErrorCode, ServerError, invalid_arg
from pbserve.server.http.codec import parse_json
from pbserve.server.http.messages import (
    HttpReply,
    HttpRequest,
    json_reply,
    method_not_allowed,
    not_found,
)

_DONE = HttpReply(200, ())


async def handle(core: InferenceCore, request: HttpRequest, parts: list[str]) -> HttpReply:
    """`parts` is the path after /v2/repository."""
    repository = None
    if parts and parts[0] not in ("index", "models"):
        repository, parts = parts[0], parts[1:]
    is_index = parts == ["index"]
    is_control = len(parts) == 3 and parts[0] == "models" and parts[1] \
        and parts[2] in ("load", "unload")
    if not (is_index or is_control):
        return not_found()
    if request.method != b"POST":
        return method_not_allowed()
    body = _body(request)
    if is_index:
        return json_reply(core.repository_index(ready_only=_ready_flag(body)))
    if repository is not None:
        raise ServerError(ErrorCode.UNSUPPORTED,
                          "'repository_name' specification is not supported")
    model = unquote(parts[1])
    if parts[2] == "load":
        config, files = _load_parameters(body)
        await core.load_model(model, config=config, files=files)
    else:
        await core.unload_model(model, unload_dependents=_unload_dependents(body))
    return _DONE


def _body(request: HttpRequest) -> dict[str, Any]:
    if not request.body:
        return {}
    body = parse_json(request.body, "request")
    if not isinstance(body, dict):
        raise invalid_arg("the request body must be a JSON object")
    return body


def _parameters(body: dict[str, Any]) -> dict[str, Any]:
    params = body.get("parameters", {})
    if not isinstance(params, dict):
        raise invalid_arg("Unable to parse 'parameters': expected a JSON object")
    return params


def _ready_flag(body: dict[str, Any]) -> bool:
    ready = body.get("ready", False)
    if type(ready) is not bool:
        raise invalid_arg("Invalid value for 'ready': expected a boolean")
    return ready


def _load_parameters(body: dict[str, Any]) -> tuple[str | None, dict[str, bytes] | None]:
    config = None
    files: dict[str, bytes] = {}
    for key, value in _parameters(body).items():
        if not isinstance(value, str):
            raise invalid_arg(f"Unable to parse load parameter '{key}': expected a string")
        if key == "config":
            config = value
        elif key.startswith("file:"):
            files[key] = _base64(key, value)
        else:
            raise invalid_arg(f"unexpected load parameter '{key}': expected 'config' or "
                              "'file:<path>'")
    return config, files or None


def _base64(key: str, value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_arg(f"failed to decode the base64 content of '{key}'") from None


def _unload_dependents(body: dict[str, Any]) -> bool:
    flag = _parameters(body).get("unload_dependents", False)
    if type(flag) is not bool:
        raise invalid_arg("Unable to parse 'unload_dependents': expected a boolean")
    return flag
