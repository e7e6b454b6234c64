"""`InferenceResponseSender`: sends responses for one request, from any thread, any time.

It enforces Triton's rules before anything reaches the runtime: flags are 0 or
FINAL, flags 0 needs a response, nothing after FINAL, and a non-decoupled model
sends exactly one response (FINAL with it or after it).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ._runtime import require_runtime
from .constants import TRITONSERVER_RESPONSE_COMPLETE_FINAL
from .error import TritonModelException
from .response import InferenceResponse

if TYPE_CHECKING:
    from .request import InferenceRequest


class InferenceResponseSender:
    """Obtained with `request.get_response_sender()`; one per request."""

    __slots__ = ("_request", "_bound", "_lock", "_closed", "_sent")

    def __init__(self, request: InferenceRequest, *, bound: bool) -> None:
        """`bound` is False for a request the model built itself (BLS), which has no
        response channel of its own."""
        self._request = request
        self._bound = bound
        self._lock = threading.Lock()
        self._closed = False
        self._sent = 0

    def send(
        self, response: InferenceResponse | None = None, flags: int = 0
    ) -> None:
        """Deliver `response` (and/or FINAL); blocks until the server has it."""
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                f"response must be an InferenceResponse or None, got {type(response).__name__}"
            )
        if isinstance(flags, bool) or not isinstance(flags, int):
            raise TypeError(f"flags must be an int, got {type(flags).__name__}")
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags "
                "is set to zero."
            )
        if not self._bound:
            raise TritonModelException(
                "Unable to send response. Response sender has no reference to the "
                "decoupled state of the model."
            )
        runtime = require_runtime("InferenceResponseSender.send")
        # Held across the runtime call so one request's responses arrive in order.
        with self._lock:
            if not runtime.decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more "
                        "than one response."
                    )
                if response is None and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send "
                        "complete final before sending a response."
                    )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            # State changes before delivery, as in Triton: a failed FINAL still closes.
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            self._sent += 1
            runtime.send_response(self._request, response, flags)

    def is_cancelled(self) -> bool:
        """Whether the client cancelled the request (same answer as the request's)."""
        return self._request.is_cancelled()

    # -- used by the stub ------------------------------------------------------------

    def _close(self) -> None:
        """Refuse further sends (the stub closed the request, e.g. after execute failed)."""
        with self._lock:
            self._closed = True

    def _is_closed(self) -> bool:
        with self._lock:
            return self._closed

    def _sends(self) -> int:
        """How many `send` calls were accepted (responses and flags-only FINALs)."""
        with self._lock:
            return self._sent

    def __repr__(self) -> str:
        return f"InferenceResponseSender(closed={self._closed}, sent={self._sent})"
