"""One unary inference request, from what a frontend parsed to the model's response: the
request path of HTTP's infer URL (http/infer.py) and gRPC's ModelInfer
(grpc/service.py), written once.

A frontend keeps its wire format: it parses its message (an HTTP body and the model named
by the URL; a ModelInferRequest), reads the trace context from its headers or metadata,
and turns the response, or the error raised here, into its reply and status. Between
the two, `UnaryInfer.start` takes every request the same way (docs/architecture.md,
"Request path"):

1. the model is resolved once, by name and version (`InferenceCore.model_handle`:
   NOT_FOUND, UNAVAILABLE as the core says);
2. the handle is told a request is coming (`expect`) before its inputs are decoded, so
   an idle instance may get ready meanwhile;
3. a decoupled model is refused, UNSUPPORTED, in the frontend's words (Triton's message
   names the endpoint);
4. the frontend's `decode` turns what it parsed into the core's InferRequest;
5. the trace context the frontend read is set on it;
6. the model is asked to run it; outputs the request asked for as classifications
   (Triton's classification extension, server/classification.py) are classified in its
   response.

`start` is a plain call that returns the model's awaitable: the frontend awaits it in its
own coroutine, so sharing the path costs a call per request, not a coroutine layer (a
request asking for a classification has one: the classifying). Errors of steps 1-5
raise from `start`; the model's own, and a classification's, come back as
`response.error`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, ClassVar

from pbserve.core.api import InferenceCore
from pbserve.core.types import InferRequest, InferResponse
from pbserve.errors import ErrorCode, ServerError
from pbserve.server.classification import classified


class UnaryInfer:
    """The unary request path over one core; a frontend subclasses it with its `decode`
    and its `decoupled_message`."""

    __slots__ = ("core",)

    # Triton's refusal of a decoupled model on this endpoint (UNSUPPORTED).
    decoupled_message: ClassVar[str]

    def __init__(self, core: InferenceCore) -> None:
        self.core = core

    def decode(self, model: str, version: str, message: Any, contents: Any,
               placed: Any) -> tuple[InferRequest, Any]:
        """The core's request of what the frontend parsed (`message`; `contents`: its
        tensor bytes as the frontend holds them; `placed`: where they lie in the core's
        pool when the frontend gathered them there apart from `message`, else None),
        and what the frontend needs to encode its response (HTTP's OutputPlan; gRPC's
        RequestOptions), whose `classes` names the outputs to classify (name -> k) or
        is None."""
        raise NotImplementedError

    def start(self, model: str, version: str, message: Any, contents: Any, placed: Any,
              trace_headers: dict[str, str] | None
              ) -> tuple[Awaitable[InferResponse], Any]:
        """Steps 1-6 of the module docstring: the model's response to await, and what
        `decode` gave for encoding it."""
        served = self.core.model_handle(model, version)
        served.expect()
        if served.decoupled:
            raise ServerError(ErrorCode.UNSUPPORTED, self.decoupled_message)
        request, reply_plan = self.decode(model, version, message, contents, placed)
        request.trace_headers = trace_headers
        classes = reply_plan.classes
        if classes is not None:
            return classified(served.infer(request), served, classes), reply_plan
        return served.infer(request), reply_plan
