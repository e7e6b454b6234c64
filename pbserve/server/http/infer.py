"""POST /v2/models/{m}[/versions/{v}]/infer: the hot path, HTTP's side of the unary
request path (server/inference.py): the body's format in, the reply's out.

Body layout (binary tensor extension): a JSON header of `Inference-Header-Content-Length`
bytes, then the binary inputs back to back in the order of `inputs`. The reply mirrors
it: JSON header, then the binary outputs, with the same header naming the JSON size.
Binary inputs reach the core as memoryview slices of the body; binary outputs are
written from the response's own buffers, and the response is released once sent.
"""

from __future__ import annotations

from typing import Any

from pbserve.core.api import InferenceCore
from pbserve.core.types import InferRequest, InferResponse
from pbserve.errors import invalid_arg
from pbserve.server.http import codec
from pbserve.server import jsonio
from pbserve.server import trace_context
from pbserve.server.inference import UnaryInfer
from pbserve.server.http.known_headers import KnownHeaders
from pbserve.server.http.compression import compress, decompress_body, response_encoding
from pbserve.server.http.limits import JSON_LENGTH_HEADER, body_limit
from pbserve.server.http.placed_body import PlacedBody
from pbserve.server.http.messages import (
    CONTENT_BINARY,
    CONTENT_JSON,
    HttpReply,
    HttpRequest,
    error_reply,
)

HEADER_LENGTH = JSON_LENGTH_HEADER
HEADER_LENGTH_OUT = b"Inference-Header-Content-Length"
_EMPTY = memoryview(b"")


def split_body(request: HttpRequest, max_input: int) -> tuple[memoryview | None, Any,
                                                               memoryview]:
    """An infer request body's JSON header, unparsed when a binary section follows it
    (else parsed: the whole body), and its binary section."""
    body = request.body
    encoding = request.headers.get(b"content-encoding")
    if encoding is not None:
        body = decompress_body(encoding, body, body_limit(max_input, request.headers))
    value = request.headers.get(HEADER_LENGTH)
    if value is None:
        return None, codec.parse_json(body, "request"), _EMPTY
    length = int(value) if value.isdigit() else -1
    if length < 0 or length > len(body):
        raise invalid_arg(f"inference header size should be in range (0, {len(body)}), "
                          f"got: {value.decode('latin-1')}")
    if length == 0:
        raise invalid_arg("a request body without a JSON header (raw binary input, "
                          "Inference-Header-Content-Length: 0) is not supported")
    view = memoryview(body)
    return view[:length], None, view[length:]


class InferRoute(UnaryInfer):
    """The infer URL of one HTTP server: its bodies decoded (placed, known, or parsed in
    full), its responses encoded; errors raise, for the routes to answer."""

    __slots__ = ("_known", "_max_input")

    decoupled_message = ("HTTP end point doesn't support models with decoupled "
                         "transaction policy")

    def __init__(self, core: InferenceCore, max_input: int) -> None:
        super().__init__(core)
        self._max_input = max_input
        self._known = KnownHeaders()

    async def handle(self, request: HttpRequest, model: str, version: str) -> HttpReply:
        pending, plan = self.start(model, version, request, request.body, None,
                                   trace_context.from_http(request.headers))
        response = await pending
        try:
            return response_reply(response, plan, request.headers.get(b"accept-encoding"))
        except BaseException:
            response.release()
            raise

    def decode(self, model: str, version: str, message: HttpRequest, contents: Any,
               placed: Any) -> tuple[InferRequest, codec.OutputPlan]:
        """`message`'s body (`contents`) -> the core's request and its OutputPlan."""
        if type(contents) is PlacedBody:  # gathered with its tensors in shm; the
            return codec.decode_infer_request(  # connection gives back what no request
                model, version, contents.header, contents.hand_over())  # took
        raw, header, binary = split_body(message, self._max_input)
        if raw is not None:
            return self._known.decode(model, version, raw, binary)
        return codec.decode_infer_request(model, version, header, binary)


def response_reply(response: InferResponse, plan: codec.OutputPlan,
                   accept_encoding: bytes | None) -> HttpReply:
    """The HTTP reply of one response; it owns the response until sent."""
    if response.error is not None:
        reply = error_reply(response.error)
        response.release()
        return reply
    head, buffers = codec.encode_infer_response(response, plan)
    header = jsonio.dumps(head)
    headers: list[tuple[bytes, bytes]] = []
    content_type = CONTENT_JSON
    if buffers:
        content_type = CONTENT_BINARY
        headers.append((HEADER_LENGTH_OUT, b"%d" % len(header)))
    encoding = response_encoding(accept_encoding)
    if encoding is not None:
        body = [compress(encoding, [header, *buffers])]
        response.release()
        headers.append((b"Content-Encoding", encoding))
        return HttpReply(200, body, content_type, headers)
    return HttpReply(200, [header, *buffers], content_type, headers,
                     on_sent=response.release)
