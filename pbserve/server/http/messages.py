"""The request and reply objects passed between the HTTP connection and the routes.

Plain slotted classes rather than dataclasses: one of each is built per request on the
hot path, and the connection (protocol.py) never needs more than these fields.
Header names are lower-cased bytes, as they come off the parser.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

from pbserve.errors import ServerError
from pbserve.server import jsonio

Buffer = bytes | bytearray | memoryview

CONTENT_JSON = b"application/json"
CONTENT_BINARY = b"application/octet-stream"
CONTENT_SSE = b"text/event-stream; charset=utf-8"


class HttpRequest:
    """One parsed HTTP request; `body` is the whole (de-chunked) body."""

    __slots__ = ("body", "headers", "method", "path", "query")

    def __init__(self, method: bytes, path: str, query: bytes,
                 headers: dict[bytes, bytes], body: Buffer) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body


class HttpReply:
    """A complete reply. `body` is a sequence of buffers written in order (binary
    outputs stay views on their source buffers); `on_sent` runs once those buffers
    are no longer needed by the transport, or the connection is gone."""

    __slots__ = ("body", "content_type", "headers", "on_sent", "status")

    def __init__(self, status: int, body: Sequence[Buffer] = (),
                 content_type: bytes | None = CONTENT_JSON,
                 headers: Sequence[tuple[bytes, bytes]] = (),
                 on_sent: Callable[[], None] | None = None) -> None:
        self.status = status
        self.content_type = content_type
        self.headers = headers
        self.body = body
        self.on_sent = on_sent


class HttpStreamReply:
    """A reply sent with chunked transfer encoding, one chunk per item of `chunks`
    (server-sent events of the generate_stream endpoint). The connection closes the
    iterator (`aclose`) if the client goes away, so the producer can cancel."""

    __slots__ = ("chunks", "content_type", "status")

    def __init__(self, chunks: AsyncIterator[bytes], status: int = 200,
                 content_type: bytes = CONTENT_SSE) -> None:
        self.status = status
        self.content_type = content_type
        self.chunks = chunks


def json_reply(value: object, status: int = 200) -> HttpReply:
    return HttpReply(status, (jsonio.dumps(value),))


def error_reply(error: ServerError) -> HttpReply:
    """Triton's error body, `{"error": "<message>"}`, with the code's HTTP status."""
    return json_reply({"error": error.message}, error.code.http_status)


def message_reply(status: int, message: str) -> HttpReply:
    """An error that has no ServerError code (405, bad HTTP), in Triton's body format."""
    return json_reply({"error": message}, status)


def not_found() -> HttpReply:
    return message_reply(404, "Not Found")


def method_not_allowed() -> HttpReply:
    return message_reply(405, "Method Not Allowed")
