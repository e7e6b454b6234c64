"""Server-sent events of a streamed completion: `data: {json}` events, `data: [DONE]`
at the end. The first piece is awaited before the reply starts, so that a request
refused by the model or the core gets its HTTP status and error body instead of a
stream.

Any error once the stream started (the model's error response, a response the endpoint
cannot read, a bug here) ends it with an event holding OpenAI's `error` object, then
`data: [DONE]`: pbserve's choice, where Triton's frontend lets the exception end the
stream without either (its stream iterators catch nothing)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from pbserve.server import jsonio
from pbserve.server.openai.errors import OpenAIError, error_event, request_error
from pbserve.server.openai.generation import Piece
from pbserve.server.openai.usage import Usage

DONE = b"data: [DONE]\n\n"
Indexed = tuple[int, Piece]
# A piece's choice object (index, text or delta, finish_reason), None: nothing to send
ChoiceOf = Callable[[int, Piece], "dict[str, Any] | None"]


def event(value: Any) -> bytes:
    return b"data: " + jsonio.dumps(value) + b"\n\n"


async def first_piece(pieces: AsyncIterator[Indexed]) -> Indexed:
    """The first (index, piece); an OpenAIError (the stream closed) when the request
    was refused or the model's first answer is an error."""
    try:
        first = await pieces.__anext__()
    except StopAsyncIteration:
        raise OpenAIError(500, "the model sent no response") from None
    except BaseException:
        await pieces.aclose()  # type: ignore[attr-defined]
        raise
    if first[1].error is not None:
        await pieces.aclose()  # type: ignore[attr-defined]
        raise first[1].error
    return first


async def with_first(first: Indexed, pieces: AsyncIterator[Indexed]
                     ) -> AsyncIterator[Indexed]:
    """`first`, then the rest of `pieces` (closed at the end)."""
    try:
        yield first
        async for item in pieces:
            yield item
    finally:
        await pieces.aclose()  # type: ignore[attr-defined]


async def choice_events(chunk: dict[str, Any], items: AsyncIterator[Indexed], usage: Usage,
                        include_usage: bool, choice_of: ChoiceOf,
                        first: Sequence[dict[str, Any]] = ()) -> AsyncIterator[bytes]:
    """A streamed completion's events: a `chunk` (id, object, model...) with each of the
    `first` choices, then with `choice_of` each piece (its tokens counted first), the
    usage chunk when `include_usage`, and [DONE]; an error piece, or an exception here,
    ends the stream with an error event and [DONE]. `items` is closed at the end, or
    when the client goes."""
    try:
        try:
            for choice in first:
                yield event({**chunk, "choices": [choice], "usage": None})
            async for index, piece in items:
                if piece.error is not None:
                    yield error_event(piece.error.status, piece.error.message)
                    break
                usage.add(index, piece)
                choice = choice_of(index, piece)
                if choice is not None:
                    yield event({**chunk, "choices": [choice], "usage": None})
            else:
                if include_usage:
                    counted = await usage.value()
                    if counted is not None:
                        yield event({**chunk, "choices": [], "usage": counted})
        except Exception as exc:  # a bug of the endpoint's, once the stream started
            error = request_error(exc, f"OpenAI {chunk.get('object')} stream of model "
                                       f"'{chunk.get('model')}'")
            yield error_event(error.status, error.message)
        yield DONE
    finally:
        await items.aclose()  # type: ignore[attr-defined]
