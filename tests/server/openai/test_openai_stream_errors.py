"""The OpenAI endpoint's generation streams in process (no server): an unexpected
exception is logged with its traceback once per request while the client gets an error
(event), a streamed reply ends with an error event and [DONE] whatever fails, and the
tokenizer's counts of long texts are made off the event loop."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator

from llm_models import write_tokenizer
from pbserve.server.openai.chat_template import ChatTemplate
from pbserve.server.openai.generation import Piece, merged
from pbserve.server.openai.sse import DONE, choice_events, with_first
from pbserve.server.openai.usage import INLINE_CHARS, Usage

LOGGER = "pbserve.openai"


class PieceBug(RuntimeError):
    """A bug in reading a response (piece_of), as the endpoint would meet it."""


class ChoiceBug(RuntimeError):
    """A bug in making a piece's choice object."""


async def failing(texts: list[str], exc: Exception) -> AsyncIterator[Piece]:
    for text in texts:
        yield Piece(text=text)
    raise exc


def logged(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.ERROR]


async def test_a_bug_in_a_stream_is_logged_once_a_request_and_answered_500(caplog):
    streams = [failing(["a "], PieceBug(f"bad piece {i}")) for i in range(3)]
    items = [item async for item in merged(streams, "OpenAI test request")]
    errors = [piece.error for _, piece in items if piece.error is not None]
    assert len(errors) == 3
    assert {(e.status, e.message.startswith("PieceBug: bad piece")) for e in errors} == {
        (500, True)}
    (record,) = logged(caplog)  # once for the request, though its three streams failed
    assert record.getMessage() == "OpenAI test request failed"
    assert record.exc_info is not None and record.exc_info[0] is PieceBug


async def collect_events(items: AsyncIterator[tuple[int, Piece]], choice_of=None
                         ) -> list[bytes]:
    chunk = {"id": "cmpl-1", "object": "text_completion", "model": "m"}
    usage = Usage("p", 1, None)
    events = choice_events(chunk, items, usage, True,
                           choice_of or (lambda i, p: {"index": i, "text": p.text}))
    return [event async for event in events]


def error_of_event(event: bytes) -> dict:
    return json.loads(event.removeprefix(b"data: "))["error"]


async def test_errors_after_the_stream_started_end_with_an_error_event_then_done(caplog):
    # a bug reading the model's responses (one stream: no merging task around it)
    items = merged([failing(["a ", "b "], PieceBug("cannot read"))], "OpenAI one stream")
    first = await items.__anext__()
    events = await collect_events(with_first(first, items))
    assert [json.loads(e[6:])["choices"][0]["text"] for e in events[:2]] == ["a ", "b "]
    assert error_of_event(events[2]) == {"message": "PieceBug: cannot read",
                                         "type": "server_error", "param": None,
                                         "code": "500"}
    assert events[3:] == [DONE]
    assert len(logged(caplog)) == 1
    caplog.clear()

    # a bug making the events themselves
    def choice_of(index: int, piece: Piece) -> dict:
        if piece.text == "b ":
            raise ChoiceBug("no choice")
        return {"index": index, "text": piece.text}

    items = merged([failing(["a ", "b ", "c "], PieceBug("unreached"))], "OpenAI events")
    events = await collect_events(items, choice_of)
    assert len(events) == 3 and events[2] == DONE
    assert error_of_event(events[1])["message"] == "ChoiceBug: no choice"
    (record,) = logged(caplog)
    assert record.exc_info[0] is ChoiceBug and "text_completion stream of model 'm'" \
        in record.getMessage()


async def test_long_texts_are_counted_off_the_event_loop_and_short_ones_on_it(tmp_path):
    """Counting 300 KB of text costs the tokenizer a few hundred ms: done on the loop's
    thread it would stall every other request that long, so a text past INLINE_CHARS is
    counted on a worker thread (encode_batch lets go of the GIL), a short one inline."""
    template = ChatTemplate.load(str(write_tokenizer(tmp_path / "tok")), None)
    text = "w1 " * 100_000  # 300 KB, 100,000 tokens of the tests' tokenizer
    assert len(text) > INLINE_CHARS
    threads: list[threading.Thread] = []

    def counting(texts: list[str]) -> list[int] | None:
        threads.append(threading.current_thread())
        return template.token_counts(texts)

    usage = Usage("a b", 2, counting)
    usage.add(0, Piece(text=text[:150_000]))
    usage.add(0, Piece(text=text[150_000:], final=True))
    usage.add(1, Piece(text="x y z", final=True))
    assert await usage.value() == {"prompt_tokens": 2, "completion_tokens": 100_003,
                                   "total_tokens": 100_005}
    assert threads and all(t is not threading.main_thread() for t in threads), threads

    threads.clear()
    short = Usage("a b", 1, counting)
    short.add(0, Piece(text="x y z", final=True))
    assert await short.value() == {"prompt_tokens": 2, "completion_tokens": 3,
                                   "total_tokens": 5}
    assert threads == [threading.main_thread()]
