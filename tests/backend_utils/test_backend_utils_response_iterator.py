"""ResponseIterator: the decoupled BLS stream, sync and async."""

import asyncio
import threading
import time

import pytest

import backend_utils as pb


def r(tag):
    return pb.InferenceResponse(parameters={"tag": tag})


def tags(responses):
    import json

    return [json.loads(x.parameters()).get("tag") for x in responses]


def test_yields_every_response_including_the_last():
    it = pb.ResponseIterator()
    it._put(r("a"), False)
    it._put(r("b"), False)
    it._put(r("c"), True)
    assert tags(it) == ["a", "b", "c"]


def test_flags_only_end_becomes_an_empty_last_response():
    it = pb.ResponseIterator()
    it._put(r("a"), False)
    it._put(None, True)
    out = list(it)
    assert len(out) == 2 and out[1].output_tensors() == [] and not out[1].has_error()


def test_next_blocks_until_the_runtime_puts_a_response():
    it = pb.ResponseIterator()
    threading.Timer(0.05, it._put, args=(r("late"), True)).start()
    start = time.monotonic()
    assert tags([next(it)]) == ["late"]
    assert time.monotonic() - start >= 0.04
    with pytest.raises(StopIteration):
        next(it)


def test_a_finished_iterator_can_be_iterated_again():
    it = pb.ResponseIterator()
    it._put(r("x"), False)
    it._put(r("y"), True)
    assert tags(it) == ["x", "y"]
    assert tags(it) == ["x", "y"]


def test_misuse_by_the_runtime_is_rejected():
    it = pb.ResponseIterator()
    with pytest.raises(TypeError):
        it._put(None, False)
    it._put(r("end"), True)
    with pytest.raises(RuntimeError):
        it._put(r("extra"), True)


def test_cancel_calls_the_runtime_until_finished():
    calls = []
    it = pb.ResponseIterator(cancel=lambda: calls.append(1))
    it.cancel()
    it._put(None, True)
    it.cancel()
    assert calls == [1]
    pb.ResponseIterator().cancel()  # no callable: nothing to do


@pytest.mark.asyncio
async def test_async_iteration_waits_without_blocking_the_loop():
    it = pb.ResponseIterator()

    def feed():
        for i in range(3):
            time.sleep(0.01)
            it._put(r(str(i)), i == 2)

    threading.Thread(target=feed).start()
    ticks = 0

    async def ticker():
        nonlocal ticks
        while not it._is_finished():
            ticks += 1
            await asyncio.sleep(0.001)

    tick_task = asyncio.create_task(ticker())
    got = [x async for x in it]
    await tick_task
    assert tags(got) == ["0", "1", "2"]
    assert ticks > 3  # the loop kept running while we waited


@pytest.mark.asyncio
async def test_cancelled_async_waiter_does_not_break_the_stream():
    it = pb.ResponseIterator()
    waiter = asyncio.ensure_future(it.__anext__())
    await asyncio.sleep(0)
    waiter.cancel()
    it._put(r("a"), True)
    assert tags([x async for x in it]) == ["a"]
