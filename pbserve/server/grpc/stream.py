"""ModelStreamInfer: one bidirectional call carrying many requests at once.

Every request read from the call runs in its own task, owned by the call's
`StreamSession`; their responses go through one outbox to the single writer (gRPC
allows one write at a time). What Triton's stream handler does, and so this does:
* a decoupled model's responses go out as they come; the responses of other models go
  out in the order their requests arrived;
* every response written carries the `triton_final_response` parameter (true on the
  last response of its request); a decoupled model's flag-only final response is sent
  (empty) only when the request set `triton_enable_empty_final_response`;
* an error is a response with `error_message` (and the request id); the call stays
  open for the other requests;
* outputs asked for as classifications are classified in each response
  (server/classification.py);
* when the client half-closes, the requests in flight finish, then the call ends OK;
* a message that does not parse ends the call INVALID_ARGUMENT (a failure to read the
  stream, INTERNAL): what the client sent cannot be trusted to mean what it said;
* when the call is cancelled (client cancel, deadline, server stop), the tasks of the
  requests in flight are cancelled;
* when the server shuts down (`stop_reading`), no more requests are read; once those in
  flight have answered (or shutdown has ended them with an error), the call ends with
  UNAVAILABLE;
* at most `max_in_flight` requests run at once: the next is read when one has answered
  (grpcio's flow control then slows the client; the zttp transport bounds what it reads
  itself, told by the context's `request_done` of each request answered).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing

import grpc
from tritonclient.grpc import service_pb2 as pb

from pbserve.core.api import InferenceCore, ModelHandle
from pbserve.core.types import InferRequest, InferResponse
from pbserve.errors import ServerError, internal
from pbserve.server.error_log import ErrorLog, error_of
from pbserve.server import trace_context
from pbserve.server.classification import classify
from pbserve.server.grpc.codec import (
    FINAL_KEY,
    RequestOptions,
    decode_infer_request,
    encode_infer_response,
    model_version,
    status_code,
    status_message,
)
from pbserve.server.grpc.handlers import Undecodable

log = logging.getLogger("pbserve.grpc")

_END = None  # the outbox item that ends the call
MAX_IN_FLIGHT = 256  # one stream's requests at once (--grpc-max-pending-per-connection)
SHUTTING_DOWN = "the server is shutting down: this stream takes no more requests"


class StreamSession:
    """The requests in flight on one ModelStreamInfer call, and the call's writer."""

    def __init__(self, core: InferenceCore, context: grpc.aio.ServicerContext,
                 errors: ErrorLog, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self._core = core
        self._context = context
        self._errors = errors
        self._max_in_flight = max_in_flight
        self._slot: asyncio.Future | None = None  # set when a request of a full set ends
        self._request_done = getattr(context, "request_done", None)
        self._status: ServerError | None = None  # the call's, when not OK
        self._outbox: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._reading = True
        self._reader: asyncio.Task | None = None
        self._shutting_down = False
        # Triton's `triton_grpc_error: true` stream header: the first error ends the call
        # with its gRPC status instead of travelling as a response's error_message.
        self._grpc_error = _header_true(context, GRPC_ERROR_HEADER)
        self._trace_headers = trace_context.from_grpc(context.invocation_metadata())
        # Completion of the latest non-decoupled request: the next one waits for it
        # before it queues its response, so they go out in arrival order.
        self._ordered_tail: asyncio.Future | None = None

    async def run(self, requests: AsyncIterator[pb.ModelInferRequest]) -> None:
        """Serve the call until the client half-closed and every request finished, or
        until the call is cancelled (then the requests in flight are cancelled)."""
        reader = self._reader = asyncio.create_task(self._read(requests))
        if self._shutting_down:  # the server began to stop as the call came in
            reader.cancel()
        try:
            write = self._context.write
            outbox = self._outbox
            while True:
                message = await outbox.get()
                if message is _END:
                    break
                await write(message)
            if self._status is not None:
                self._context.set_code(status_code(self._status))
                self._context.set_details(status_message(self._status.message))
            elif self._shutting_down:
                self._context.set_code(grpc.StatusCode.UNAVAILABLE)
                self._context.set_details(SHUTTING_DOWN)
        finally:
            tasks = [reader, *self._tasks]
            for task in tasks:
                task.cancel()
            # Let the cancelled tasks unwind (closing their response iterators) before
            # the call is gone; their results are collected so nothing is logged.
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read(self, requests: AsyncIterator[pb.ModelInferRequest]) -> None:
        try:
            async for request in requests:
                if type(request) is Undecodable:
                    self._end(request.error)
                    return
                self._start(request)
                while len(self._tasks) >= self._max_in_flight:
                    self._slot = asyncio.get_running_loop().create_future()
                    await self._slot
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the transport failed: end the call
            self._end(internal(f"reading the request stream failed: {exc!r}"))
            return
        self._reading = False
        self._maybe_end()

    def stop_reading(self) -> None:
        """The server shuts down: read no more requests, end the call (UNAVAILABLE) once
        those in flight have answered."""
        self._shutting_down = True
        self._reading = False
        if self._reader is not None:
            self._reader.cancel()
        self._maybe_end()

    def _start(self, request: pb.ModelInferRequest) -> None:
        """Decode one request and start its task; requests of non-decoupled models (and
        requests refused before inference) keep their place in the response order."""
        try:
            version = model_version(request.model_version)
            served = self._core.model_handle(request.model_name, version)
            infer_request, options = decode_infer_request(request, version)
            infer_request.trace_headers = self._trace_headers
        except Exception as exc:  # noqa: BLE001 - becomes this request's error response
            served, infer_request, options, error = None, None, None, exc
        else:
            error = None
        if served is not None and served.decoupled:
            assert infer_request is not None and options is not None
            coro = self._serve_decoupled(request, served, infer_request, options)
        else:
            previous = self._ordered_tail
            mine = self._ordered_tail = asyncio.get_running_loop().create_future()
            classes = options.classes if options is not None else None
            coro = self._serve_ordered(request, served, infer_request, classes, error,
                                       previous, mine)
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _end(self, error: ServerError) -> None:
        """End the call now with `error`'s status (the requests in flight are cancelled)."""
        self._status = self._errors.request_failed("ModelStreamInfer", error)
        self._outbox.put_nowait(_END)

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if self._request_done is not None:
            self._request_done()
        slot, self._slot = self._slot, None
        if slot is not None and not slot.done():
            slot.set_result(None)
        self._maybe_end()

    def _maybe_end(self) -> None:
        if not self._reading and not self._tasks:
            self._outbox.put_nowait(_END)

    async def _serve_ordered(self, request: pb.ModelInferRequest, served: ModelHandle | None,
                             infer_request: InferRequest | None,
                             classes: dict[str, int] | None, error: Exception | None,
                             previous: asyncio.Future | None, mine: asyncio.Future) -> None:
        try:
            if served is None or infer_request is None:
                failure = error_of(error)  # type: ignore[arg-type]
                message = refused_message(request, failure)
            else:
                message, failure = await self._infer(request, served, infer_request,
                                                     classes)
            if previous is not None and not previous.done():
                await previous
            if failure is not None and self._grpc_error:
                self._end(failure)
            else:
                self._outbox.put_nowait(message)
        finally:
            if not mine.done():
                mine.set_result(None)

    async def _infer(self, request: pb.ModelInferRequest, served: ModelHandle,
                     infer_request: InferRequest, classes: dict[str, int] | None
                     ) -> tuple[pb.ModelStreamInferResponse, ServerError | None]:
        """The response message, and the error it carries (None when it is data)."""
        try:
            response = await served.infer(infer_request)
            try:
                if classes is not None:
                    response = classify(response, served, classes)
                return response_message(request, response), response.error
            finally:
                response.release()
        except Exception as exc:  # noqa: BLE001 - becomes this request's error response
            failure = self._errors.request_failed("ModelStreamInfer", exc)
            return refused_message(request, failure), failure

    async def _serve_decoupled(self, request: pb.ModelInferRequest, served: ModelHandle,
                               infer_request: InferRequest, options: RequestOptions) -> None:
        put = self._outbox.put_nowait
        classes = options.classes
        try:
            async with aclosing(served.stream_infer(infer_request)) as responses:
                async for response in responses:
                    try:
                        if classes is not None:
                            response = classify(response, served, classes)
                        if is_flag_only(response):
                            if options.empty_final:
                                put(empty_final_message(request))
                        elif response.error is not None and self._grpc_error:
                            self._end(response.error)
                            return
                        else:
                            put(response_message(request, response))
                    finally:
                        response.release()
        except Exception as exc:  # noqa: BLE001 - becomes this request's error response
            failure = self._errors.request_failed("ModelStreamInfer", exc)
            if self._grpc_error:
                self._end(failure)
            else:
                put(refused_message(request, failure))


GRPC_ERROR_HEADER = "triton_grpc_error"


def _header_true(context: grpc.aio.ServicerContext, key: str) -> bool:
    """Whether the call's metadata sets `key` to true."""
    for name, value in context.invocation_metadata() or ():
        if name == key:
            return str(value).lower() == "true"
    return False


def is_flag_only(response: InferResponse) -> bool:
    """The final flag sent on its own (no response object in Triton's terms)."""
    return (response.final and not response.outputs and response.error is None
            and not response.parameters)


def response_message(request: pb.ModelInferRequest,
                     response: InferResponse) -> pb.ModelStreamInferResponse:
    """One response of the core (data or a model's error) as a stream message."""
    error = response.error
    if error is None:
        infer_response = encode_infer_response(response)
        message = pb.ModelStreamInferResponse(infer_response=infer_response)
    else:
        message = pb.ModelStreamInferResponse(error_message=error.message,
                                              infer_response=_bare_response(request))
    message.infer_response.parameters[FINAL_KEY].bool_param = response.final
    return message


def empty_final_message(request: pb.ModelInferRequest) -> pb.ModelStreamInferResponse:
    message = pb.ModelStreamInferResponse(infer_response=_bare_response(request))
    message.infer_response.parameters[FINAL_KEY].bool_param = True
    return message


def _bare_response(request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    """A response naming the request, with no outputs."""
    return pb.ModelInferResponse(id=request.id, model_name=request.model_name,
                                 model_version=request.model_version)


def refused_message(request: pb.ModelInferRequest,
                    error: ServerError) -> pb.ModelStreamInferResponse:
    """A request that failed before (or instead of) inference: the error and the id."""
    return pb.ModelStreamInferResponse(error_message=error.message,
                                       infer_response=pb.ModelInferResponse(id=request.id))

