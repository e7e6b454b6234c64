"""A dynamic batch holds requests of equal input shapes (Triton's RequiredEqualInputs):
the key of a request (scheduling/equal_inputs.py), `choose_batch`'s rule, and the
scheduler on a hand-driven clock. End to end: tests/core/test_dynamic_batching.py."""

from __future__ import annotations

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from fakes import fake_clock
from pbserve.core.pending import PendingRequest
from pbserve.core.scheduling.equal_inputs import EqualInputs
from pbserve.core.scheduling.scheduler import Scheduler, choose_batch
from pbserve.core.types import InferRequest, TensorData

NO_PREFERRED = frozenset()


def config(text: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" max_batch_size: 8 {text}', mc.ModelConfig())


def request(rid: str = "", **shapes: tuple[int, ...]) -> InferRequest:
    return InferRequest("m", id=rid, inputs=[
        TensorData(name, "FP32", shape, np.zeros(shape, np.float32).tobytes())
        for name, shape in shapes.items()])


# -- choose_batch -------------------------------------------------------------------------

def test_a_request_of_another_key_sends_the_batch_before_it_now():
    # 1 + 1 would wait 10 s for 4; the second's shape differs: the first goes alone, now
    assert choose_batch([(1, 0.0, "a"), (1, 0.1, "b")], frozenset({4}), 4, 8, 10.0,
                        0.2) == (1, 0.0)
    # and the second, first in line, waits its own delay
    assert choose_batch([(1, 0.1, "b")], frozenset({4}), 4, 8, 10.0, 0.2) == (0, 10.1)


def test_requests_of_one_key_still_wait_for_the_preferred_size():
    assert choose_batch([(1, 0.0, "a"), (1, 0.1, "a")], frozenset({4}), 4, 8, 10.0,
                        0.2) == (0, 10.0)


def test_a_preferred_size_before_the_other_key_is_what_is_sent():
    # 1 + 1 (preferred 2) + 1, then another key: Triton sends the preferred 2, the third waits
    items = [(1, 0.0, "a"), (1, 0.0, "a"), (1, 0.0, "a"), (1, 0.0, "b")]
    assert choose_batch(items, frozenset({2}), 2, 8, 10.0, 0.1) == (2, 0.0)


def test_without_a_delay_the_batch_ends_at_the_other_key():
    assert choose_batch([(2, 0.0, "a"), (1, 0.0, "a"), (1, 0.0, "b")], NO_PREFERRED, 8, 8,
                        0.0, 0.0) == (2, 0.0)


# -- the key of a request -----------------------------------------------------------------

def test_variable_inputs_compare_their_shapes_past_the_batch_dim():
    rule = EqualInputs(config("""
        input [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] },
                { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]"""))
    assert rule.needed
    one = rule.key(request(A=(1, 16), B=(1, 4)))
    assert one == rule.key(request(B=(3, 4), A=(3, 16)))  # batch size and order: no matter
    assert one != rule.key(request(A=(1, 8), B=(1, 4)))


def test_fixed_and_ragged_inputs_need_no_rule():
    rule = EqualInputs(config("""
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 16 ] },
                { name: "B" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]"""))
    assert not rule.needed
    assert rule.key(request(A=(1, 16), B=(1, 3))) is None


def test_with_an_optional_input_the_inputs_carried_must_match():
    rule = EqualInputs(config("""
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
                { name: "B" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]"""))
    assert rule.needed
    assert rule.key(request(A=(1, 4))) == rule.key(request(A=(2, 4)))
    assert rule.key(request(A=(1, 4))) != rule.key(request(A=(1, 4), B=(1, 4)))


def test_a_model_without_a_batch_dim_compares_the_whole_shape():
    rule = EqualInputs(text_format.Parse("""name: "m" max_batch_size: 0
        input [ { name: "A" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]""", mc.ModelConfig()))
    assert rule.key(request(A=(3, 2))) != rule.key(request(A=(4, 2)))


# -- the scheduler ------------------------------------------------------------------------

class Instance:
    ready = True

    def __init__(self) -> None:
        self.ran: list[list[str]] = []

    def execute(self, batch) -> None:
        self.ran.append([p.request.id for p in batch])


class Staged:
    def stage(self, pending) -> bool:
        return True

    def may_wait_ahead(self, pending) -> bool:
        return True


async def test_the_scheduler_sends_the_waiting_batch_when_another_shape_arrives():
    cfg = config("""input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
        dynamic_batching { preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: 10000000 }
        """)
    scheduler = Scheduler(cfg, Staged())
    loop = fake_clock(scheduler)
    instance = Instance()
    scheduler.instances = [instance]

    def submit(rid: str, shape: tuple[int, int]) -> None:
        pending = PendingRequest(int(rid), request(rid, IN=shape), (), [], shape[0],
                                 lambda blocks: None, False)
        pending.arrival_s = loop.now
        scheduler.submit(pending)

    submit("1", (1, 16))
    submit("2", (3, 16))
    assert instance.ran == []  # 4: waiting for 6
    loop.advance(1.0)
    submit("3", (1, 8))
    assert instance.ran == [["1", "2"]]  # sent as the other shape came
    scheduler.on_idle(instance)
    loop.advance(9.9)
    assert instance.ran == [["1", "2"]]  # the third waits its own 10 s
    loop.advance(0.1)
    assert instance.ran == [["1", "2"], ["3"]]
