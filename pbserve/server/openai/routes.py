"""The OpenAI endpoint's URL space, and its errors as OpenAI's error bodies:

    GET  /v1/models, /v1/models/{model}
    POST /v1/models/{model}/load, /v1/models/{model}/unload   (explicit mode)
    POST /v1/completions, /v1/chat/completions, /v1/embeddings
    GET  /health/ready, /metrics                              (as Triton's frontend)

Anything else is 404 `Not Found`; a known path with the wrong method is 405.
"""

from __future__ import annotations

import inspect
import logging
from urllib.parse import unquote

from pbserve.errors import ServerError
from pbserve.server.error_log import ErrorLog
from pbserve.server.http.messages import HttpReply, HttpRequest, HttpStreamReply
from pbserve.server.openai.body import json_body
from pbserve.server.openai.chat import create_chat_completion
from pbserve.server.openai.completions import create_completion
from pbserve.server.openai.embeddings import create_embedding
from pbserve.server.openai.endpoint import Endpoint
from pbserve.server.openai.errors import OpenAIError, error_reply
from pbserve.server.openai.models import ModelList

log = logging.getLogger("pbserve.openai")

GET = b"GET"
POST = b"POST"
CONTENT_METRICS = b"text/plain; version=0.0.4; charset=utf-8"
_GENERATE = {"/v1/completions": create_completion,
             "/v1/chat/completions": create_chat_completion,
             "/v1/embeddings": create_embedding}
_NOT_READY = "Attached inference engine is not ready for inference requests."

Reply = HttpReply | HttpStreamReply


class OpenAIRoutes:
    """The request handler of the OpenAI server."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._models = ModelList(endpoint)
        self._errors = ErrorLog(log)

    async def __call__(self, request: HttpRequest) -> Reply:
        try:
            return await self._dispatch(request)
        except OpenAIError as exc:
            return error_reply(exc)
        except ServerError as exc:
            return error_reply(OpenAIError.from_server_error(exc))
        except Exception as exc:
            error = self._errors.request_failed(
                f"OpenAI {request.method.decode()} {request.path[:200]}", exc)
            return error_reply(OpenAIError.from_server_error(error))

    async def _dispatch(self, request: HttpRequest) -> Reply:
        path, method = request.path, request.method
        handler = _GENERATE.get(path)
        if handler is not None:
            _method(method, POST)
            return await handler(self._endpoint, json_body(request,
                                                           self._endpoint.max_input))
        if path == "/v1/models":
            _method(method, GET)
            return self._models.list()
        if path.startswith("/v1/models/"):
            return await self._model(request, path[len("/v1/models/"):])
        if path == "/health/ready":
            _method(method, GET)
            if await self._endpoint.core.is_ready():
                return HttpReply(200, (), content_type=None)
            raise OpenAIError(400, _NOT_READY)
        if path == "/metrics":
            _method(method, GET)
            text = self._endpoint.core.metrics_text()
            if inspect.isawaitable(text):
                text = await text
            return HttpReply(200, (text.encode(),), CONTENT_METRICS)
        raise OpenAIError(404, "Not Found")

    async def _model(self, request: HttpRequest, rest: str) -> Reply:
        parts = rest.split("/")
        if len(parts) == 1 and parts[0]:
            _method(request.method, GET)
            return self._models.get(unquote(parts[0]))
        if len(parts) == 2 and parts[0] and parts[1] in ("load", "unload"):
            _method(request.method, POST)
            name = unquote(parts[0])
            if parts[1] == "load":
                return await self._models.load(name)
            return await self._models.unload(name)
        raise OpenAIError(404, "Not Found")


def _method(method: bytes, expected: bytes) -> None:
    if method != expected:
        raise OpenAIError(405, "Method Not Allowed")
