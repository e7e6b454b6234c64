"""Triton's shared-memory extensions over HTTP: the region endpoints and the tensor
parameters that name a region.

    GET  /v2/systemsharedmemory[/region/R]/status      [{"name", "key", "offset", "byte_size"}]
    POST /v2/systemsharedmemory/region/R/register      {"key", "offset", "byte_size"}
    POST /v2/systemsharedmemory[/region/R]/unregister  (no R: every region)
    GET  /v2/cudasharedmemory[/region/R]/status        [{"name", "device_id", "byte_size"}]
    POST /v2/cudasharedmemory/region/R/register        {"raw_handle": {"b64"}, "device_id",
                                                        "byte_size"} (a GPU is needed)
    POST /v2/cudasharedmemory[/region/R]/unregister

The tensor parameters (`shared_memory_region`, `_offset`, `_byte_size`) are read by
codec.py.

Replies, codes and messages are Triton's (pbserve/core/memory/shared_memory.py), except
that a register body field of the wrong JSON type is 400 "Unable to parse ..." (Triton:
500 with its JSON library's message), as elsewhere in pbserve's HTTP codec.
"""

from __future__ import annotations

import base64
import binascii
from urllib.parse import unquote

from pbserve.core.api import InferenceCore
from pbserve.errors import invalid_arg
from pbserve.server.http.codec import parse_json, unsigned_field
from pbserve.server.http.messages import (
    CONTENT_JSON,
    HttpReply,
    HttpRequest,
    json_reply,
    method_not_allowed,
    not_found,
)

SYSTEM = "systemsharedmemory"
CUDA = "cudasharedmemory"
_ACTIONS = {"status": b"GET", "register": b"POST", "unregister": b"POST"}
_OK = HttpReply(200, (), CONTENT_JSON)


def handle(core: InferenceCore, request: HttpRequest, kind: str, rest: list[str]) -> HttpReply:
    """`rest`: the path after /v2/<kind>, split on "/"."""
    if len(rest) == 1:
        name, action = "", rest[0]
    elif len(rest) == 3 and rest[0] == "region" and rest[1]:
        name, action = unquote(rest[1]), rest[2]
    else:
        return not_found()
    method = _ACTIONS.get(action)
    if method is None:
        return not_found()
    if request.method != method:
        return method_not_allowed()
    manager = core.shared_memory
    if kind == SYSTEM:
        if action == "status":
            return json_reply(manager.status(name))
        if action == "unregister":
            manager.unregister(name)
            return _OK
        manager.check_allowed()
        if not name:
            raise invalid_arg("'region name' is necessary to register system shared "
                              "memory region")
        key, offset, byte_size = _register_body(request)
        manager.register(name, key, offset, byte_size)
        return _OK
    if action == "status":
        return json_reply(manager.cuda_status(name))
    if action == "unregister":
        manager.unregister_cuda(name)
        return _OK
    manager.check_allowed()
    if not name:
        raise invalid_arg("'region name' is necessary to register cuda shared memory "
                          "region")
    manager.register_cuda(name, *_cuda_register_body(request))
    return _OK


def _register_body(request: HttpRequest) -> tuple[str, int, int]:
    body = parse_json(request.body, "request")
    if not isinstance(body, dict):
        raise invalid_arg("Shared memory register request must be a JSON object")
    if "key" not in body:
        raise invalid_arg("Shared memory register request has no 'key' field")
    key = body["key"]
    if not isinstance(key, str):
        raise invalid_arg("Unable to parse 'key': expected a string")
    offset = unsigned_field(body, "offset")
    if "byte_size" not in body:
        raise invalid_arg("Shared memory register request has no 'byte_size' field")
    return key, offset, unsigned_field(body, "byte_size")


def _cuda_register_body(request: HttpRequest) -> tuple[bytes, int, int]:
    """Triton's body: {"raw_handle": {"b64": <base64 of the IPC handle>}, "device_id",
    "byte_size"}."""
    body = parse_json(request.body, "request")
    if not isinstance(body, dict):
        raise invalid_arg("Shared memory register request must be a JSON object")
    handle = body.get("raw_handle")
    if not isinstance(handle, dict) or not isinstance(handle.get("b64"), str):
        raise invalid_arg("Shared memory register request has no 'raw_handle' field with "
                          "a 'b64' string")
    try:
        raw = base64.b64decode(handle["b64"], validate=True)
    except (binascii.Error, ValueError):
        raise invalid_arg("Unable to parse 'raw_handle': invalid base64") from None
    if "byte_size" not in body:
        raise invalid_arg("Shared memory register request has no 'byte_size' field")
    return raw, unsigned_field(body, "device_id"), unsigned_field(body, "byte_size")
