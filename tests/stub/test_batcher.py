"""The stub's own batcher's parts (stub/batcher.py) on their own: its settings from a
model config, the choice it makes (the core's `choose_batch`), and what a batch's
answer gives each frontend and the statistics. The whole path, with real processes:
tests/frontends/test_stub_batcher.py."""

from __future__ import annotations

import math

import pytest

from backend_utils.error import TritonError
from stub import protocol as p
from stub.batcher import BatchCounts, Queued, StubBatcher, batch_answers
from stub.errors import RESCHEDULE_UNSUPPORTED


def _batcher(**batching) -> StubBatcher:
    return StubBatcher.of({"max_batch_size": 8, "dynamic_batching": batching})


def test_the_settings_come_from_the_config_as_initialize_gets_it():
    batcher = _batcher(preferred_batch_size=[2, 4], max_queue_delay_microseconds="1000")
    for i in range(3):
        batcher.add(1, i, ("msg", i), 1, 0)
    now = batcher._queue[-1].queued_s  # before the delay is over
    batch, wait = batcher.next_batch(now)  # a preferred size is made up: sent at once
    assert [q.key for q in batch] == [0, 1] and wait == 0.0
    batch, wait = batcher.next_batch(now)  # one left: it waits out the delay
    assert batch == [] and wait == pytest.approx(0.001)
    assert [q.key for q in batcher.next_batch(now + 0.001)[0]] == [2]
    assert not batcher.waiting


def test_a_request_goes_at_the_deadline_the_batcher_gave_whatever_the_clock_reads():
    # 1.1 + 0.001 - 1.1 < 0.001 in floating point: the wake-up at the deadline must send
    batcher = _batcher(max_queue_delay_microseconds="1000")
    batcher.add(1, 0, (), 1, 0)
    batcher._queue[0].queued_s = 1.1
    batch, wait = batcher.next_batch(1.1)
    assert batch == []
    assert [q.key for q in batcher.next_batch(1.1 + wait)[0]] == [0]


def test_a_model_without_a_dynamic_batcher_runs_each_request_alone():
    batcher = StubBatcher.of({"max_batch_size": 8})
    batcher.add(1, 1, (), 1, 0)
    batcher.add(1, 2, (), 1, 0)
    assert [q.key for q in batcher.next_batch(0.0)[0]] == [1]


def test_max_batch_size_counts_batch_sizes_not_requests():
    batcher = _batcher(max_queue_delay_microseconds=10_000_000)
    for key, size in enumerate((3, 4, 2)):
        batcher.add(1, key, (), size, 0)
    batch, _ = batcher.next_batch(0.0)
    assert [q.key for q in batch] == [0, 1]  # 3 + 4; with the 2, more than 8


def test_a_frontend_that_ended_takes_its_requests_off_the_queue():
    batcher = _batcher()
    batcher.add(1, 10, (), 1, 0)
    batcher.add(2, 20, (), 1, 0)
    batcher.add(1, 11, (), 1, 0)
    assert [q.key for q in batcher.forget(1)] == [10, 11]
    assert [q.key for q in batcher.next_batch(math.inf)[0]] == [20]


def _queued(origin: int, key: int, size: int = 1) -> Queued:
    return Queued(origin, key, (), size, 0, 0.0)


def test_each_frontend_gets_its_own_answers_and_the_batch_is_counted():
    batch = [_queued(1, 10, 2), _queued(2, 20), _queued(1, 11)]
    ok = p.response_record(None, (), "{}")
    error = p.response_record((int(TritonError.INVALID_ARG), "the model's"), (), "{}")
    counts = BatchCounts()
    answers = batch_answers(batch, None, ((10, ok), (20, error), (11, ok)), (), False,
                            1, counts)
    assert answers == {1: [(10, ok), (11, ok)], 2: [(20, error)]}
    sizes, requests = counts.take()
    assert [(size, executions) for size, executions, _ in sizes] == [(4, 1)]
    # an error response of the model's succeeds, as in Triton's Python backend
    successes, inferences, *_, failures, cancelled, _ = requests
    assert (successes, inferences, failures, cancelled) == (3, 4, 0, 0)
    assert not counts


def test_a_batch_that_raised_fails_each_request_with_its_error():
    counts = BatchCounts()
    answers = batch_answers([_queued(1, 10), _queued(2, 20)], "boom", (), (), False, 1,
                            counts)
    record = p.response_record((int(TritonError.INTERNAL), "boom"), (), "{}")
    assert answers == {1: [(10, record)], 2: [(20, record)]}
    sizes, requests = counts.take()
    assert [(size, executions) for size, executions, _ in sizes] == [(2, 1)]
    assert requests[0] == 0 and requests[5] == 2  # no success, two failures


def test_a_rescheduled_request_is_refused_and_a_dropped_batch_is_not_an_execution():
    counts = BatchCounts()
    answers = batch_answers([_queued(1, 10)], None, ((10, None),), (10,), False, 1, counts)
    (key, record), = answers[1]
    assert key == 10 and record[0] == (int(TritonError.INVALID_ARG), RESCHEDULE_UNSUPPORTED)
    counts.take()
    cancelled = p.response_record((int(TritonError.CANCELLED), "cancelled"), (), "{}")
    answers = batch_answers([_queued(2, 20)], None, ((20, cancelled),), (), True, 1, counts)
    assert answers == {2: [(20, cancelled)]}
    sizes, requests = counts.take()
    assert sizes == () and requests[6] == 1  # no execution; one cancelled
