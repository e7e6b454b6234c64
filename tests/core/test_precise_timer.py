"""The batchers' timer (scheduling/precise_timer.py): to the microsecond on uvloop and on
asyncio's loop, and a dynamic batcher's wait shorter than a millisecond is one wake-up,
not a turn of the loop after another."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import uvloop
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.pending import PendingRequest
from pbserve.core.scheduling.precise_timer import PreciseTimer
from pbserve.core.scheduling.scheduler import Scheduler
from pbserve.core.types import InferRequest

LOOPS = ["asyncio", "uvloop"]


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    return uvloop.new_event_loop() if kind == "uvloop" else asyncio.new_event_loop()


@pytest.mark.parametrize("kind", LOOPS)
def test_the_earliest_time_asked_fires_once(kind):
    loop = new_loop(kind)
    fired: list[float] = []
    timer = PreciseTimer(loop, lambda: fired.append(time.monotonic()))
    try:
        now = timer.now()
        timer.at(now + 0.010)
        timer.at(now + 5.0)  # later: the sooner one stands
        timer.at(now + 0.002)  # sooner: it replaces it
        loop.run_until_complete(asyncio.sleep(0.05))
        assert len(fired) == 1 and fired[0] >= now + 0.002
        timer.at(timer.now() - 1.0)  # already passed: the next turn
        loop.run_until_complete(asyncio.sleep(0.01))
        assert len(fired) == 2
        timer.at(timer.now() + 0.005)
        timer.cancel()
        loop.run_until_complete(asyncio.sleep(0.02))
        assert len(fired) == 2
    finally:
        timer.close()
        loop.close()


@pytest.mark.parametrize("kind", LOOPS)
def test_a_wait_under_a_millisecond_ends_at_its_time_not_before(kind):
    loop = new_loop(kind)
    late: list[float] = []
    timer = PreciseTimer(loop, lambda: late.append(time.monotonic() - when))
    try:
        for _ in range(5):
            when = timer.now() + 0.0003
            timer.at(when)
            loop.run_until_complete(asyncio.sleep(0.005))
        assert len(late) == 5 and min(late) >= 0.0
    finally:
        timer.close()
        loop.close()


def test_close_gives_its_descriptor_back():
    loop = uvloop.new_event_loop()
    timer = PreciseTimer(loop, lambda: None)
    try:
        before = set(os.listdir("/proc/self/fd"))
        timer.at(timer.now() + 10.0)
        opened = set(os.listdir("/proc/self/fd")) - before
        assert len(opened) == 1
        timer.close()
        assert not opened & set(os.listdir("/proc/self/fd"))
        timer.at(timer.now() - 1.0)  # a later wait opens another
        fired = []
        timer._callback = lambda: fired.append(1)
        loop.run_until_complete(asyncio.sleep(0.01))
        assert fired == [1]
    finally:
        timer.close()
        loop.close()


class ReadyInstance:
    ready = True

    def __init__(self) -> None:
        self.sent: list[float] = []

    def execute(self, batch) -> None:
        self.sent.append(time.monotonic())
        self.ready = False


class Staged:
    def stage(self, pending) -> bool:
        return True

    def may_wait_ahead(self, pending) -> bool:
        return True


def test_a_short_queue_delay_wakes_the_batcher_once():
    """max_queue_delay 300 us, one request: its batch leaves once the delay passed, after
    one wake-up of the batcher (on uvloop's millisecond timers it ran its dispatch on
    every turn of the loop until the millisecond passed: a busy loop)."""
    cfg = text_format.Parse("""name: "m" max_batch_size: 8
        dynamic_batching { max_queue_delay_microseconds: 300 }""", mc.ModelConfig())

    async def run() -> tuple[float, float, int]:
        scheduler = Scheduler(cfg, Staged())
        instance = ReadyInstance()
        scheduler.instances = [instance]
        wakes = 0
        on_timer = scheduler._on_timer

        def counted() -> None:
            nonlocal wakes
            wakes += 1
            on_timer()
        scheduler._timer._callback = counted
        pending = PendingRequest(1, InferRequest("m", id="1"), (), [], 1,
                                 lambda blocks: None, False)
        scheduler.submit(pending)
        assert instance.sent == []  # it waits for more
        await asyncio.sleep(0.02)
        scheduler.close()
        return pending.arrival_s, instance.sent[0], wakes

    loop = uvloop.new_event_loop()
    try:
        arrival, sent, wakes = loop.run_until_complete(run())
    finally:
        loop.close()
    assert sent - arrival >= 0.0003
    assert wakes == 1
