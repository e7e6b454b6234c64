"""POST /v1/embeddings: a model's embedding of each input as OpenAI's `list` of
`embedding` objects (floats, or base64 of little-endian float32 with
`encoding_format: "base64"`).

A vLLM embedding model (an `embedding_request` input) gets one request with the whole
input and answers JSON in `text_output`, as Triton's frontend sends and reads it. Any
other model with a `text_input` (pbserve's; Triton's frontend refuses them) gets one
request per input string, run at once, and answers with a float output (the first
FP16, FP32 or FP64 one) or JSON in `text_output`; its usage counts
`num_input_tokens` when it answers them.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np

from pbserve.core.api import ModelHandle
from pbserve.core.types import InferRequest, InferResponse
from pbserve.errors import ServerError
from pbserve.server.http.messages import HttpReply, json_reply
from pbserve.server.openai.body import Body
from pbserve.server.openai.endpoint import Endpoint
from pbserve.server.openai.errors import OpenAIError, bad_request
from pbserve.server.openai.tensors import count_output, numbers, output_named, strings

_FLOATS = ("FP16", "FP32", "FP64")


async def create_embedding(endpoint: Endpoint, body: Body) -> HttpReply:
    model = body.string("model", required=True)
    text = _input(body)
    encoding = body.string("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise bad_request(f"'encoding_format' must be float or base64, not {encoding!r}",
                          "encoding_format")
    dimensions = body.integer("dimensions", minimum=1)
    handle, plan = endpoint.plans.resolve(model)
    if "embedding_request" in plan.inputs:
        requests = [plan.embedding_request(text, dimensions)]
    else:
        items = [text] if isinstance(text, str) else text
        if not all(isinstance(item, str) for item in items):
            raise bad_request(f"model '{model}' takes text: token ids are for a vLLM "
                              f"embedding model", "input")
        requests = [plan.embedding_request(item, dimensions) for item in items]
    results = await asyncio.gather(*(_run(handle, request) for request in requests),
                                   return_exceptions=True)
    vectors: list[list[float]] = []
    prompt_tokens: int | None = 0
    for result in results:
        if isinstance(result, BaseException):
            if isinstance(result, ServerError):
                raise OpenAIError.from_server_error(result)
            raise result
        found, tokens = result
        vectors += found
        prompt_tokens = None if prompt_tokens is None or tokens is None \
            else prompt_tokens + tokens
    data = [{"object": "embedding", "index": i, "embedding": _encoded(v, encoding)}
            for i, v in enumerate(vectors)]
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens} \
        if prompt_tokens is not None else None
    return json_reply({"object": "list", "data": data, "model": model, "usage": usage})


def _input(body: Body) -> Any:
    if not body.has("input"):
        raise bad_request("'input' is a required field", "input")
    value = body.raw("input")
    if isinstance(value, str):
        if not value:
            raise bad_request("'input' must not be empty", "input")
        return value
    if not isinstance(value, list) or not value:
        raise bad_request("'input' must be a string, a list of strings or token ids",
                          "input")
    if all(isinstance(v, str) and v for v in value):
        return value
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value) or all(
            isinstance(v, list) and v and all(isinstance(t, int) for t in v)
            for v in value):
        return value
    raise bad_request("'input' must be a string, a list of non-empty strings, a list of "
                      "token ids or a list of lists of them", "input")


async def _run(handle: ModelHandle, request: InferRequest
               ) -> tuple[list[list[float]], int | None]:
    """The embeddings of one request and its prompt's tokens (if reported); every
    response is released and a decoupled model's stream closed, also on a failure."""
    responses: list[InferResponse] = []
    stream = None
    try:
        if not handle.decoupled:
            responses.append(await handle.infer(request))
        else:
            stream = handle.stream_infer(request)
            async for response in stream:
                responses.append(response)
        for response in responses:
            if response.error is not None:
                raise OpenAIError.from_server_error(response.error)
            if response.outputs:
                return _vectors(response), count_output(response, "num_input_tokens")
        raise OpenAIError(500, "the model answered no embedding")
    finally:
        for response in responses:
            response.release()
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def _vectors(response: InferResponse) -> list[list[float]]:
    text = output_named(response, "text_output")
    if text is not None and text.datatype == "BYTES":
        try:
            value = json.loads("".join(strings(text)))
        except ValueError:
            raise OpenAIError(500, "the model's text_output is not a JSON embedding") \
                from None
        if isinstance(value, list) and value and isinstance(value[0], list):
            return value
        return [value]
    for output in response.outputs:
        if output.datatype in _FLOATS:
            return [numbers(output).astype(np.float64).tolist()]
    raise OpenAIError(500, "the model answered no embedding: no float output and no "
                           "text_output")


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
