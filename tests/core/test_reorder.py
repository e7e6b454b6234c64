"""preserve_ordering's reorder buffer (scheduling/reorder.py) on its own: responses reach
their callers in the order the requests were batched."""

from __future__ import annotations

import asyncio

from pbserve.core.pending import PendingRequest
from pbserve.core.scheduling.reorder import ReorderBuffer
from pbserve.core.types import InferRequest, InferResponse


class _Response(InferResponse):
    """An InferResponse that records its release."""

    released: list[str] = []

    def release(self) -> None:
        _Response.released.append(f"{self.id}{'' if self.final else '+'}")


def _request(key: int, streaming: bool = False) -> PendingRequest:
    return PendingRequest(key, InferRequest("m", id=str(key)), (), [], 1, lambda blocks: None,
                          streaming)


def _response(pending: PendingRequest, final: bool = True) -> _Response:
    return _Response("m", "1", pending.request.id, final=final)


def _streamed(pending: PendingRequest) -> list[str]:
    out = []
    while not pending.stream.empty():
        response = pending.stream.get_nowait()
        out.append(f"{response.id}{'' if response.final else '+'}")
    return out


async def test_responses_of_a_later_request_wait_for_the_earlier_ones():
    buffer = ReorderBuffer()
    first, second, third = _request(1), _request(2), _request(3)
    for pending in (first, second, third):
        buffer.enter(pending)
    third.deliver(_response(third))
    second.deliver(_response(second))
    assert not second.future.done() and not third.future.done()  # held
    assert second.done and third.done  # complete all the same (their blocks are freed)
    first.deliver(_response(first))
    assert [p.future.result().id for p in (first, second, third)] == ["1", "2", "3"]


async def test_a_stream_at_the_head_goes_on_and_the_next_waits_for_its_final_response():
    buffer = ReorderBuffer()
    first, second = _request(1, streaming=True), _request(2, streaming=True)
    buffer.enter(first)
    buffer.enter(second)
    first.deliver(_response(first, final=False))
    second.deliver(_response(second, final=False))
    second.deliver(_response(second))
    assert _streamed(first) == ["1+"]
    assert _streamed(second) == []
    first.deliver(_response(first))
    assert _streamed(first) == ["1"]
    assert _streamed(second) == ["2+", "2"]


async def test_a_request_not_batched_yet_is_not_held():
    buffer = ReorderBuffer()
    batched, queued = _request(1), _request(2)
    buffer.enter(batched)
    queued.deliver(_response(queued))  # e.g. rejected in the queue: never entered
    assert queued.future.result().id == "2"
    assert not batched.future.done()


async def test_a_caller_that_left_holds_back_nobody_and_its_responses_are_released():
    _Response.released.clear()
    buffer = ReorderBuffer()
    first, second, third = _request(1), _request(2), _request(3)
    for pending in (first, second, third):
        buffer.enter(pending)
    third.deliver(_response(third))
    second.future.cancel()  # in the middle: the head still holds the others back
    assert not third.future.done()
    first.future.cancel()  # the head goes: the next one that waits is the third
    third_again = _request(4)  # a response offered after the cancel sees it at once
    buffer.enter(third_again)
    third_again.deliver(_response(third_again))
    assert third.future.result().id == "3"
    assert third_again.future.result().id == "4"
    first.deliver(_response(first))  # answered after its caller left: released unread
    await asyncio.sleep(0)  # the cancelled futures' callbacks
    assert _Response.released == ["1"]


async def test_responses_held_for_a_caller_that_left_are_released_when_it_leaves():
    _Response.released.clear()
    buffer = ReorderBuffer()
    first, second = _request(1), _request(2)
    buffer.enter(first)
    buffer.enter(second)
    second.deliver(_response(second))  # held behind the first
    second.future.cancel()
    await asyncio.sleep(0)  # the future's done callback
    assert _Response.released == ["2"]
    first.deliver(_response(first))
    assert first.future.result().id == "1"
