"""What one HTTP client may make the server hold: request body bytes (and, decompressed,
what they expand to). One `HttpLimits` per listening server; see docs/http_stack.md.
"""

from __future__ import annotations

from dataclasses import dataclass

# Triton's HTTP_DEFAULT_MAX_INPUT_SIZE (--http-max-input-size).
DEFAULT_MAX_INPUT_SIZE = 1 << 26  # 64 MiB


@dataclass(frozen=True)
class HttpLimits:
    """`max_input_size`: the largest request body, in bytes, as sent (Content-Length or
    the chunks received) and once decompressed; a larger one is answered 413 (400 when
    only its decompressed form is too large, as Triton) before the rest is read."""

    max_input_size: int = DEFAULT_MAX_INPUT_SIZE

    def __post_init__(self) -> None:
        if self.max_input_size <= 0:
            raise ValueError("--http-max-input-size must be greater than 0")


def too_large_message(size: int | None, limit: int) -> str:
    """Triton's wording, for a body of `size` bytes (None: more than `limit` received)."""
    what = f"of {size} bytes" if size is not None else f"of more than {limit} bytes"
    return (f"request body {what} exceeds the maximum allowed input size of {limit} "
            f"bytes. Use --http-max-input-size to increase the limit.")
