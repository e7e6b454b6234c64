"""Triton's HTTP URL space, mapped onto the InferenceCore.

Paths are matched by splitting on "/" (no regular expressions on the hot path); the
accepted shapes are those of Triton's own patterns:

    /v2                                       GET  server metadata
    /v2/health/(live|ready)                   GET  200 or 400, no body
    /v2/models/stats                          GET  statistics of every model
    /v2/models/M[/versions/V][/KIND]          KIND: "" (metadata), ready, config, stats
                                                   (GET); infer, generate,
                                                   generate_stream (POST)
    /v2/repository[/R]/index                  POST
    /v2/repository[/R]/models/M/(load|unload) POST (a repository name R: 501, as Triton)
    /v2/(system|cuda)sharedmemory[/region/R]/(status|register|unregister)  (shm.py)
    /v2/logging                               GET, POST  (logging.py)
    /v2[/models/M]/trace/setting              GET, POST  (trace.py)

Anything else is 404 `{"error": "Not Found"}`; a known path with the wrong method is
405 `{"error": "Method Not Allowed"}`.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote

from pbserve.core.api import InferenceCore
from pbserve.server.http import logging as http_logging
from pbserve.server.http import repository as http_repository
from pbserve.server.http import shm as http_shm
from pbserve.server.http import trace as http_trace
from pbserve.server import statistics
from pbserve.server.error_log import ErrorLog
from pbserve.server.http.generate import handle_generate
from pbserve.server.http.infer import InferRoute
from pbserve.server.http.limits import HttpLimits
from pbserve.server.restrictions import Restriction, http_category, http_refusal
from pbserve.server.http.messages import (
    HttpReply,
    HttpRequest,
    HttpStreamReply,
    error_reply,
    json_reply,
    message_reply,
    method_not_allowed,
    not_found,
)

log = logging.getLogger("pbserve.http")

GET = b"GET"
POST = b"POST"
_MODEL_KINDS = {"": GET, "ready": GET, "config": GET, "stats": GET,
                "infer": POST, "generate": POST, "generate_stream": POST}
_OK = HttpReply(200, (), content_type=None)

Reply = HttpReply | HttpStreamReply


def model_path(parts: list[str]) -> tuple[str, str, str] | None:
    """(model, version, kind) of /v2/models/M[/versions/V][/KIND] split on "/" (version
    "" is the latest; kind "" is the metadata); None for any other shape."""
    if len(parts) < 4 or parts[0] or parts[1] != "v2" or parts[2] != "models":
        return None
    name, rest = parts[3], parts[4:]
    version = ""
    if rest and rest[0] == "versions":
        if len(rest) < 2 or not (rest[1].isascii() and rest[1].isdigit()):
            return None
        version, rest = rest[1], rest[2:]
    kind = rest[0] if len(rest) == 1 else ("" if not rest else None)
    if not name or kind not in _MODEL_KINDS:
        return None
    if "%" in name:
        name = unquote(name)
    return name, version, kind


class Routes:
    """The request handler of the HTTP server: dispatch, then map errors to replies."""

    def __init__(self, core: InferenceCore, limits: HttpLimits = HttpLimits(),
                 restricted: dict[str, Restriction] | None = None) -> None:
        self._core = core
        self._max_input = limits.max_input_size
        self._errors = ErrorLog(log)
        self._restricted = restricted or {}  # --http-restricted-api, by group
        self._infer = InferRoute(core, limits.max_input_size)

    async def __call__(self, request: HttpRequest) -> Reply:
        try:
            parts = request.path.split("/")
            if parts[-1] == "infer" and request.method == POST and not self._restricted:
                target = model_path(parts)  # the hot path, straight to its handler
                if target is not None:
                    return await self._infer.handle(request, target[0], target[1])
            return await self._dispatch(request, parts)
        except Exception as exc:
            return error_reply(self._errors.request_failed(
                f"HTTP {request.method.decode()} {request.path[:200]}", exc))

    async def _dispatch(self, request: HttpRequest, parts: list[str]) -> Reply:
        if len(parts) < 2 or parts[0] or parts[1] != "v2":
            return not_found()
        if self._restricted:
            refused = self._refusal(request, parts)
            if refused is not None:
                return refused
        if parts[-2:] == ["trace", "setting"] and (
                len(parts) == 4 or (len(parts) == 6 and parts[2] == "models")):
            return await http_trace.handle(self._core, request,
                                           unquote(parts[3]) if len(parts) == 6 else "")
        if len(parts) >= 4 and parts[2] == "models":
            return await self._model(request, parts)
        if len(parts) == 2:
            return self._get(request, self._core.server_metadata)
        if parts[2] == "health" and len(parts) == 4 and parts[3] in ("live", "ready"):
            return await self._health(request, parts[3])
        if parts[2] == "repository":
            return await http_repository.handle(self._core, request, parts[3:])
        if parts[2] == http_shm.SYSTEM or parts[2] == http_shm.CUDA:
            return http_shm.handle(self._core, request, parts[2], parts[3:])
        if parts[2] == "logging" and len(parts) == 3:
            return http_logging.handle(request)
        return not_found()

    async def _model(self, request: HttpRequest, parts: list[str]) -> Reply:
        if len(parts) == 4 and parts[3] == "stats":
            if request.method != GET:
                return method_not_allowed()
            return json_reply(await statistics.all_models(self._core))
        target = model_path(parts)
        if target is None:
            return not_found()
        name, version, kind = target
        if request.method != _MODEL_KINDS[kind]:
            return method_not_allowed()
        return await self._model_kind(request, kind, name, version)

    async def _model_kind(self, request: HttpRequest, kind: str, name: str,
                          version: str) -> Reply:
        core = self._core
        if kind == "infer":
            return await self._infer.handle(request, name, version)
        if kind == "":
            return json_reply(core.model_metadata(name, version))
        if kind == "ready":
            if await core.model_ready(name, version):
                return _OK
            return message_reply(400, "Model version not ready")
        if kind == "config":
            return json_reply(core.model_config(name, version))
        if kind == "stats":
            return json_reply(await statistics.model(core, name, version))
        return await handle_generate(core, request, name, version,
                                     kind == "generate_stream", self._max_input)

    def _refusal(self, request: HttpRequest, parts: list[str]) -> HttpReply | None:
        """403 (Triton's) for a request to a restricted group without its header."""
        category = http_category(parts)
        restriction = self._restricted.get(category) if category is not None else None
        if restriction is None:
            return None
        reason = http_refusal(restriction, request.headers)
        return message_reply(403, reason) if reason is not None else None

    @staticmethod
    def _get(request: HttpRequest, produce: Any) -> HttpReply:
        if request.method != GET:
            return method_not_allowed()
        return json_reply(produce())

    async def _health(self, request: HttpRequest, kind: str) -> HttpReply:
        if request.method != GET:
            return method_not_allowed()
        ok = self._core.is_live() if kind == "live" else await self._core.is_ready()
        return _OK if ok else HttpReply(400, (), content_type=None)
