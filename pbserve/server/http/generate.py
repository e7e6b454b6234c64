"""POST .../generate and .../generate_stream: Triton's (provisional) generate extension.

The request is a flat JSON object. Each key (also inside "parameters") that names a
model input becomes that tensor, its shape fitted to the input's metadata shape the
way Triton does (fixed dimensions first, the innermost -1 takes the rest, other -1s
are 1); "id" is the request id; every other key is a request parameter. A response
is a JSON object with model_name, model_version, id, the response parameters and one
key per output (a single element unwrapped from its list).

/generate answers one JSON object and needs exactly one response from the model;
/generate_stream answers server-sent events, `data: {...}\\n\\n` per response (an
error mid-stream is `data: {"error": ...}`), the HTTP status being that of the first.
Decoupled models run through the model handle's `stream_infer`, the others its `infer`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pbserve.core.api import InferenceCore, ModelHandle
from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.errors import ServerError, internal, invalid_arg
from pbserve.server.http import codec
from pbserve.server import jsonio, trace_context
from pbserve.server.http.compression import decompress_body
from pbserve.server.http.messages import (
    HttpReply,
    HttpRequest,
    HttpStreamReply,
    error_reply,
    json_reply,
)


async def handle_generate(core: InferenceCore, request: HttpRequest, model: str,
                          version: str, streaming: bool,
                          max_input: int) -> HttpReply | HttpStreamReply:
    metadata = core.model_metadata(model, version)
    infer_request = build_request(model, version, metadata, _body(request, max_input))
    infer_request.trace_headers = trace_context.from_http(request.headers)
    responses = _responses(core.model_handle(model, version), infer_request)
    if streaming:
        return await _stream_reply(responses)
    return await _single_reply(responses)


def _body(request: HttpRequest, max_input: int) -> dict[str, Any]:
    body = decompress_body(request.headers.get(b"content-encoding"), request.body, max_input)
    if not body:
        return {}
    value = codec.parse_json(body, "request")
    if not isinstance(value, dict):
        raise invalid_arg("the generate request must be a JSON object")
    return value


# --- request ---------------------------------------------------------------------------

def build_request(model: str, version: str, metadata: dict[str, Any],
                  body: dict[str, Any]) -> InferRequest:
    inputs = {item["name"]: item for item in metadata.get("inputs", [])}
    request = InferRequest(model_name=model, model_version=version)
    request_id = body.get("id", "")
    if not isinstance(request_id, str):
        raise invalid_arg("Unable to parse 'id': expected a string")
    request.id = request_id
    for key, value in body.items():
        if key == "id":
            continue
        if key == "parameters" and key not in inputs:
            if not isinstance(value, dict):
                raise invalid_arg("Expected JSON object for keyword: 'parameters'")
            for name, nested in value.items():
                _map_key(request, inputs, name, nested)
        else:
            _map_key(request, inputs, key, value)
    return request


def _map_key(request: InferRequest, inputs: dict[str, Any], key: str, value: Any) -> None:
    spec = inputs.get(key)
    if spec is None:
        if not isinstance(value, (str, int, float)):
            raise invalid_arg(f"parameter '{key}' has invalid type. It should be either "
                              "'int', 'bool', or 'string'.")
        request.parameters[key] = value
        return
    values = value if isinstance(value, list) else [value]
    shape = fit_shape(key, spec.get("shape", [-1]), len(values))
    data = codec.json_to_raw(key, spec["datatype"], shape, values)
    request.inputs.append(TensorData(key, spec["datatype"], tuple(shape), data))


def fit_shape(name: str, dims: list[int], count: int) -> list[int]:
    """Triton's rule: fixed dimensions divide the element count, the innermost
    variable dimension takes what is left and the other variable ones are 1."""
    shape = list(dims)
    left = count
    for dim in reversed(shape):
        if dim != -1:
            if dim == 0 or left % dim:
                raise invalid_arg(f"The schema can not convert input '{name}' to tensor "
                                  "with proper shape")
            left //= dim
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == -1:
            shape[i], left = left, 1
    if left != 1:
        raise invalid_arg(f"The schema can not convert input '{name}' to tensor with "
                          "proper shape")
    return shape


# --- responses -------------------------------------------------------------------------

async def _responses(served: ModelHandle, request: InferRequest
                     ) -> AsyncIterator[InferResponse]:
    """The model's responses, without a decoupled model's flag-only final one."""
    if not served.decoupled:
        yield await served.infer(request)
        return
    stream = served.stream_infer(request)
    try:
        async for response in stream:
            if response.outputs or response.error is not None or response.parameters:
                yield response
            else:
                response.release()
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def response_json(response: InferResponse) -> bytes:
    """One response as the generate extension's JSON object; releases the response."""
    try:
        if response.error is not None:
            return jsonio.dumps({"error": response.error.message})
        body: dict[str, Any] = {"model_name": response.model_name,
                                "model_version": response.model_version}
        if response.id:
            body["id"] = response.id
        body.update(response.parameters)
        for output in response.outputs:
            body[output.name] = _output_value(output)
        return jsonio.dumps(body)
    finally:
        response.release()


def _output_value(output: TensorData) -> Any:
    values = codec.raw_to_json(output)
    if values is None:
        raise invalid_arg(f"sending {output.datatype} data of output '{output.name}' via "
                          "JSON is not supported")
    return values[0] if len(values) == 1 else values


async def _single_reply(responses: AsyncIterator[InferResponse]) -> HttpReply:
    got: list[InferResponse] = []
    try:
        async for response in responses:
            got.append(response)
    except BaseException:
        for response in got:
            response.release()
        raise
    if len(got) != 1:
        for response in got:
            response.release()
        raise internal("generate expects model to produce exactly 1 response, use "
                       "generate stream for model that generates various number of "
                       "responses")
    response = got[0]
    if response.error is not None:
        reply = error_reply(response.error)
        response.release()
        return reply
    return HttpReply(200, (response_json(response),))


async def _stream_reply(responses: AsyncIterator[InferResponse]) -> HttpReply | HttpStreamReply:
    """Server-sent events; the first response is awaited here so that its error, if
    any, sets the HTTP status (as Triton does)."""
    try:
        first = await responses.__anext__()
    except StopAsyncIteration:
        await responses.aclose()
        return json_reply({"error": "the model sent no response"}, 500)
    except BaseException:
        await responses.aclose()
        raise
    status = first.error.code.http_status if first.error is not None else 200
    return HttpStreamReply(_events(first, responses), status=status)


async def _events(first: InferResponse,
                  responses: AsyncIterator[InferResponse]) -> AsyncIterator[bytes]:
    try:
        yield _event(first)
        async for response in responses:
            yield _event(response)
    finally:
        await responses.aclose()


def _event(response: InferResponse) -> bytes:
    try:
        data = response_json(response)
    except ServerError as exc:
        data = jsonio.dumps({"error": exc.message})
    return b"data: " + data + b"\n\n"
