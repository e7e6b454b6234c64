"""What one HTTP client may make the server hold: request body bytes (and, decompressed,
what they expand to), time (a head, a body, an idle keep-alive connection), connections.
One `HttpLimits` per listening server; see docs/http_stack.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from pbserve.server.limits import DEFAULT_MAX_INPUT_SIZE  # also the CLI's, from here

# nginx's client_header_timeout and client_body_timeout; uvicorn's timeout_keep_alive.
DEFAULT_HEADER_TIMEOUT_S = 60.0
DEFAULT_BODY_TIMEOUT_S = 60.0
DEFAULT_KEEPALIVE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HttpLimits:
    """* `max_input_size`: the most bytes of tensor data a request body may carry, and
      of its JSON header (`body_limit`), as sent (Content-Length or the chunks received)
      and once decompressed; a larger body is answered 413 (400 when only its
      decompressed form is too large, as Triton) before the rest is read.
    * `header_timeout_s`: from a request's first byte to the end of its head;
    * `body_timeout_s`: the longest pause between two reads of a body;
      past either, 408 and the connection is closed.
    * `keepalive_timeout_s`: how long a connection with no request in progress (and a
      new one that sent nothing yet) stays open.
      0 turns a timeout off.
    * `max_connections`: open connections at most (None: derived from the process's
      file descriptor limit); past it, a new connection takes the place of the one idle
      the longest, or is answered 503 and closed when none is idle."""

    max_input_size: int = DEFAULT_MAX_INPUT_SIZE
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S
    max_connections: int | None = None

    def __post_init__(self) -> None:
        if self.max_input_size <= 0:
            raise ValueError("--http-max-input-size must be greater than 0")
        for flag, value in (("header", self.header_timeout_s), ("body", self.body_timeout_s),
                            ("keepalive", self.keepalive_timeout_s)):
            if value < 0:
                raise ValueError(f"--http-{flag}-timeout-secs must not be negative")
        if self.max_connections is not None and self.max_connections <= 0:
            raise ValueError("--http-max-connections must be greater than 0")

    def timeouts(self) -> list[float]:
        """The timeouts that are on (the sweeper's round follows the shortest)."""
        return [t for t in (self.header_timeout_s, self.body_timeout_s,
                            self.keepalive_timeout_s) if t > 0]


# The request header naming the length of a body's JSON part (binary tensor extension).
JSON_LENGTH_HEADER = b"inference-header-content-length"


def body_limit(max_input_size: int, headers: dict[bytes, bytes]) -> int:
    """The largest body a request may send: `max_input_size` of tensor data (binary, or
    JSON in a body that is all JSON) plus its JSON header when the binary tensor
    extension names one, that header too being at most `max_input_size`. So a tensor of
    exactly the limit, as Triton takes it, fits with its header."""
    value = headers.get(JSON_LENGTH_HEADER)
    if value is None or not value.isdigit():
        return max_input_size
    return max_input_size + min(int(value), max_input_size)


def too_large_message(size: int | None, limit: int) -> str:
    """Triton's wording, for a body of `size` bytes (None: more than `limit` received)."""
    what = f"of {size} bytes" if size is not None else f"of more than {limit} bytes"
    return (f"request body {what} exceeds the maximum allowed input size of {limit} "
            f"bytes. Use --http-max-input-size to increase the limit.")
