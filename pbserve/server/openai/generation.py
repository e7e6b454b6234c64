"""Running a generation request: the model's responses as `Piece`s (text, token
counts, the final flag; each response released as soon as it is read), and the
pieces of several requests at once (`n` choices) as one stream.

A decoupled model runs through the handle's `stream_infer`, any other through `infer`
(one response). Closing the iterator (the client went away, or the request failed)
closes the model's stream, which cancels its request (Model.stream_infer).

Whatever a stream raises (the core refusing the request, a response the endpoint
cannot read, a bug) ends it as an error piece, so that a streamed reply can end with an
error event; an unexpected exception is logged with its traceback, once per request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from pbserve.core.api import ModelHandle
from pbserve.core.types import InferRequest, InferResponse
from pbserve.errors import ServerError
from pbserve.server.openai.errors import OpenAIError, request_error
from pbserve.server.openai.tensors import count_output, output_named, strings, text_output

FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")


@dataclass
class Piece:
    """What one response of the model said."""

    text: str = ""
    final: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None  # the model's own `finish_reason` output, if any
    error: OpenAIError | None = None  # the request failed: its status and message


def piece_of(response: InferResponse) -> Piece:
    """The piece of `response`, which is released here."""
    try:
        if response.error is not None:
            return Piece(final=True, error=OpenAIError.from_server_error(response.error))
        if not response.outputs:
            return Piece(final=response.final)
        reason = output_named(response, "finish_reason")
        reason_text = "".join(strings(reason)) if reason is not None \
            and reason.datatype == "BYTES" else None
        return Piece(text_output(response), response.final,
                     count_output(response, "num_input_tokens"),
                     count_output(response, "num_output_tokens"),
                     reason_text if reason_text in FINISH_REASONS else None)
    finally:
        response.release()


async def pieces(handle: ModelHandle, request: InferRequest) -> AsyncIterator[Piece]:
    """The pieces of one request, the last with `final` (or an `error`)."""
    if not handle.decoupled:
        yield piece_of(await handle.infer(request))
        return
    stream = handle.stream_infer(request)
    try:
        async for response in stream:
            piece = piece_of(response)
            yield piece
            if piece.error is not None:
                return
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


class _Failures:
    """The errors of one request's streams as error pieces: the first unexpected one
    logged with its traceback (as `what` failed), the others of that request not."""

    def __init__(self, what: str) -> None:
        self._what: str | None = what

    def piece(self, exc: Exception) -> Piece:
        error = request_error(exc, self._what)
        if not isinstance(exc, (OpenAIError, ServerError)):
            self._what = None  # a bug, logged (or left out by the rate limit): once
        return Piece(final=True, error=error)


async def merged(streams: list[AsyncIterator[Piece]], what: str
                 ) -> AsyncIterator[tuple[int, Piece]]:
    """The pieces of several streams as they come, each with its stream's index; every
    stream is closed (its request cancelled) when this one is. A stream that raises
    ends with an error piece (`what`: the request, named in the log of a bug)."""
    failures = _Failures(what)
    if len(streams) == 1:
        stream = streams[0]
        try:
            async for piece in stream:
                yield 0, piece
        except Exception as exc:
            yield 0, failures.piece(exc)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        return
    queue: asyncio.Queue[tuple[int, Piece | None]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[Piece]) -> None:
        try:
            async for piece in stream:
                await queue.put((index, piece))
        except Exception as exc:
            await queue.put((index, failures.piece(exc)))
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
            await queue.put((index, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            index, piece = await queue.get()
            if piece is None:
                left -= 1
            else:
                yield index, piece
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
