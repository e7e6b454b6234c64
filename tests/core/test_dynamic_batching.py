"""The dynamic batcher against a real server: batches gathered within the queue delay,
queue policies with Triton's errors, priority levels."""

from __future__ import annotations

import queue
import re
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import gevent
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from client_inputs import http_input
from pbserve.testing import running_server
from polling import wait_for
from fakes import fake_clock

TEST_MODELS = Path(__file__).resolve().parents[1] / "models"
MODELS = ("batch_gather", "queue_timeout", "queue_bounded", "queue_priority", "ordered_stream",
          "batch_shapes")
WAIT_S = 20.0


def int_input(value: int) -> httpclient.InferInput:
    return http_input("IN", np.array([[value]], np.int32))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("dynamic")
    repo = root / "models"
    for name in MODELS:
        shutil.copytree(TEST_MODELS / name, repo / name)
    with running_server(repo, log_path=root / "server.log") as srv:
        yield srv


def pending_count(server, model: str) -> int:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as reply:
        text = reply.read().decode()
    found = re.search(rf'nv_inference_pending_request_count{{model="{model}",version="1"}} '
                      r"(\d+)", text)
    return int(found.group(1)) if found else 0


class Gate:
    """Holds a gated model's only instance busy until opened."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "gate"

    @property
    def parameters(self) -> dict:
        return {"gate": str(self.path)}

    def wait_started(self) -> None:
        wait_for(Path(str(self.path) + ".started").exists, "the gated request to start")

    def open(self) -> None:
        self.path.touch()


def test_requests_of_three_clients_meet_in_one_execute(server):
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            result = server.http_client(network_timeout=WAIT_S).infer(
                "batch_gather", [int_input(10 + i)])
            results[i] = result
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert not errors, errors
    for i in range(3):
        np.testing.assert_array_equal(results[i].as_numpy("OUT"), [[10 + i]])
        assert results[i].as_numpy("REQUESTS_IN_EXECUTE")[0][0] == 3


def test_queue_timeout_rejects_with_tritons_error(server, tmp_path):
    gate = Gate(tmp_path)
    client = server.http_client(concurrency=2, network_timeout=WAIT_S)
    first = client.async_infer("queue_timeout", [int_input(1)], parameters=gate.parameters)
    try:
        gate.wait_started()
        with pytest.raises(InferenceServerException) as caught:
            client.infer("queue_timeout", [int_input(2)])
        assert "Request timeout expired" in caught.value.message()
        assert caught.value.status() == "503"
    finally:
        gate.open()
    np.testing.assert_array_equal(first.get_result(timeout=WAIT_S).as_numpy("OUT"), [[1]])


def test_full_queue_rejects_with_tritons_error(server, tmp_path):
    gate = Gate(tmp_path)
    client = server.http_client(concurrency=3, network_timeout=WAIT_S)
    first = client.async_infer("queue_bounded", [int_input(1)], parameters=gate.parameters)
    try:
        gate.wait_started()
        second = client.async_infer("queue_bounded", [int_input(2)])
        wait_for(lambda: pending_count(server, "queue_bounded") == 2, "the second to queue")
        with pytest.raises(InferenceServerException) as caught:
            client.infer("queue_bounded", [int_input(3)], request_id="third")
        assert caught.value.message() == "[request id: third] Exceeds maximum queue size"
        assert caught.value.status() == "503"
    finally:
        gate.open()
    assert first.get_result(timeout=WAIT_S).as_numpy("OUT")[0][0] == 1
    assert second.get_result(timeout=WAIT_S).as_numpy("OUT")[0][0] == 2


def test_higher_priority_requests_run_first(server, tmp_path):
    gate = Gate(tmp_path)
    client = server.http_client(concurrency=6, network_timeout=WAIT_S)
    first = client.async_infer("queue_priority", [int_input(0)], parameters=gate.parameters)
    try:
        gate.wait_started()
        # 0 and out-of-range priorities mean the default level (2, the lower one).
        low = [client.async_infer("queue_priority", [int_input(v)], priority=p)
               for v, p in ((1, 0), (2, 2), (3, 7))]
        high = [client.async_infer("queue_priority", [int_input(v)], priority=1)
                for v in (11, 12)]
        wait_for(lambda: pending_count(server, "queue_priority") == 6, "all to queue")
    finally:
        gate.open()
    assert first.get_result(timeout=WAIT_S).as_numpy("CALL")[0][0] == 1
    high_calls = sorted(int(r.get_result(timeout=WAIT_S).as_numpy("CALL")[0][0]) for r in high)
    low_calls = sorted(int(r.get_result(timeout=WAIT_S).as_numpy("CALL")[0][0]) for r in low)
    assert high_calls == [2, 3]
    assert low_calls == [4, 5, 6]


def test_preserve_ordering_holds_a_response_until_those_before_it_are_sent(server, tmp_path):
    """Two instances: the second request is answered while the first still runs; its
    response still leaves second."""
    gate, mark = Gate(tmp_path), tmp_path / "second_answered"
    events: queue.Queue = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: events.put((result, error)),
                        stream_timeout=WAIT_S)

    def send(value: int, request_id: str, parameters: dict) -> None:
        tensor = grpcclient.InferInput("IN", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[value]], np.int32))
        client.async_stream_infer("ordered_stream", [tensor], request_id=request_id,
                                  parameters=parameters)

    order = []
    try:
        send(1, "first", gate.parameters)
        gate.wait_started()
        send(2, "second", {"mark": str(mark)})
        wait_for(mark.exists, "the second request to be answered")
        gate.open()
        for _ in range(2):
            result, error = events.get(timeout=WAIT_S)
            assert error is None, error
            order.append(result.get_response().id)
    finally:
        gate.open()
        client.stop_stream()
        client.close()
    assert order == ["first", "second"]


# -- a batch holds requests of one input shape (Triton's L0_batcher *_different_shape) ----

SHAPES_DELAY_S = 2.0  # batch_shapes' max_queue_delay_microseconds
GROUP_GAP_S = 0.3  # between groups of requests sent at once


def shape_batches(server) -> dict[int, int]:
    """batch_shapes' executions so far, by batch size (its batch statistics)."""
    client = server.http_client()
    try:
        stats = client.get_inference_statistics("batch_shapes")
    finally:
        client.close()
    return {int(s["batch_size"]): int(s["compute_infer"]["count"])
            for s in stats["model_stats"][0]["batch_stats"]}


def timed_requests(server, groups: list[list[tuple[int, int]]]) -> list[float]:
    """Send each group's requests ((batch size, length of IN) each) at once, a group
    GROUP_GAP_S after the one before: every request's response time, in seconds."""
    times: dict[int, float] = {}
    errors: list[BaseException] = []

    def client(index: int, batch: int, length: int) -> None:
        data = np.full((batch, length), index, np.float32)
        http = server.http_client(network_timeout=WAIT_S)
        try:
            start = time.monotonic()
            result = http.infer("batch_shapes", [http_input("IN", data)])
            times[index] = time.monotonic() - start
            np.testing.assert_array_equal(result.as_numpy("OUT"), data)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            http.close()
            gevent.get_hub().destroy(destroy_loop=True)  # this thread's: its fds with it

    threads = []
    for number, group in enumerate(groups):
        if number:
            time.sleep(GROUP_GAP_S)
        for batch, length in group:
            threads.append(threading.Thread(target=client, args=(len(threads), batch, length)))
            threads[-1].start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not errors, errors
    return [times[i] for i in range(len(threads))]


def batches_since(server, before: dict[int, int]) -> dict[int, int]:
    after = shape_batches(server)
    return {size: count - before.get(size, 0) for size, count in after.items()
            if count != before.get(size, 0)}


def test_a_request_of_another_shape_sends_the_waiting_one_and_waits_its_delay(server):
    # test_multi_batch_different_shape: 1 + 1 make a preferred size, but not of one shape
    before = shape_batches(server)
    first, other = timed_requests(server, [[(1, 16)], [(1, 8)]])
    assert other >= SHAPES_DELAY_S - 0.05 and first < other, (first, other)
    assert batches_since(server, before) == {1: 2}


def test_another_shape_sends_a_batch_of_no_preferred_size_at_once(server):
    # test_multi_batch_not_preferred_different_shape: 1 + 3 wait for 6; a third request of
    # another shape sends them, and waits the delay itself
    before = shape_batches(server)
    one, three, other = timed_requests(server, [[(1, 16), (3, 16)], [(1, 8)]])
    # the 4 left as the other came (GROUP_GAP_S in), not at their delay's end
    assert other >= SHAPES_DELAY_S - 0.05 and max(one, three) < other, (one, three, other)
    assert batches_since(server, before) == {4: 1, 1: 1}


def test_the_next_shape_makes_its_own_preferred_batch(server):
    # test_multi_batch_preferred_different_shape: 1 + 3 of one shape, then 1 + 5 (preferred)
    # of another: nobody waits for the delay
    before = shape_batches(server)
    timed_requests(server, [[(1, 16), (3, 16)], [(1, 8), (5, 8)]])
    assert batches_since(server, before) == {4: 1, 6: 1}


# -- the batcher's choices, on a hand-driven clock (no server) ----------------------------

class FakeInstance:
    ready = False

    def __init__(self) -> None:
        self.ran: list[list[int]] = []

    def execute(self, batch) -> None:
        self.ran.append([int(p.request.id) for p in batch])


class PlacedAdmission:
    """The admission (scheduling/admission.py) of requests whose inputs are in shm."""

    def stage(self, pending) -> bool:
        return True

    def may_wait_ahead(self, pending) -> bool:
        return True


def scheduler_for(config: str):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    from pbserve.core.scheduling.scheduler import Scheduler

    cfg = text_format.Parse(config, mc.ModelConfig())
    scheduler = Scheduler(cfg, PlacedAdmission())
    fake_clock(scheduler)
    instance = FakeInstance()
    scheduler.instances = [instance]
    return scheduler, instance


def submit(scheduler, value: int, priority: int = 0, timeout_us: int = 0):
    from pbserve.core.pending import PendingRequest
    from pbserve.core.types import InferRequest

    request = InferRequest("m", id=str(value), priority=priority, timeout_us=timeout_us)
    pending = PendingRequest(value, request, (), [], 1, lambda blocks: None, False)
    pending.arrival_s = scheduler._loop.now
    scheduler.submit(pending)
    return pending


async def test_delay_action_moves_a_timed_out_request_behind_its_level():
    scheduler, instance = scheduler_for("""
        name: "m" max_batch_size: 1
        dynamic_batching { default_queue_policy {
            timeout_action: DELAY default_timeout_microseconds: 100000 } }""")
    submit(scheduler, 1)
    submit(scheduler, 2)
    scheduler._loop.advance(0.2)  # both wait past their timeout: delayed, not rejected
    third = submit(scheduler, 3)
    instance.ready = True
    for _ in range(3):
        scheduler.on_idle(instance)
    assert instance.ran == [[3], [1], [2]]
    assert not third.done


async def test_a_request_may_shorten_the_queue_timeout_but_not_lengthen_it():
    scheduler, _ = scheduler_for("""
        name: "m" max_batch_size: 1
        dynamic_batching { default_queue_policy {
            default_timeout_microseconds: 100000 allow_timeout_override: true } }""")
    short = submit(scheduler, 1, timeout_us=10000)
    longer = submit(scheduler, 2, timeout_us=500000)
    scheduler._loop.advance(0.05)
    assert short.done and short.future.result().error.message == "Request timeout expired"
    assert not longer.done
    scheduler._loop.advance(0.06)
    assert longer.done and longer.future.result().error.code.name == "UNAVAILABLE"


async def test_preferred_batch_sizes_and_the_queue_delay_choose_the_batch():
    scheduler, instance = scheduler_for("""
        name: "m" max_batch_size: 8
        dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 50000 }
        """)
    for value in range(1, 6):
        submit(scheduler, value)
    instance.ready = True
    scheduler.on_idle(instance)  # 5 queued: the largest preferred size that they make up
    assert instance.ran == [[1, 2, 3, 4]]
    scheduler.on_idle(instance)  # 1 left: it waits for company up to the delay
    assert instance.ran == [[1, 2, 3, 4]]
    scheduler._loop.advance(0.06)
    assert instance.ran == [[1, 2, 3, 4], [5]]


async def test_a_queue_timeout_still_fires_after_the_queue_delay_timer_sent_a_batch():
    scheduler, instance = scheduler_for("""
        name: "m" max_batch_size: 8
        dynamic_batching { max_queue_delay_microseconds: 50000
                           default_queue_policy { default_timeout_microseconds: 100000 } }""")
    instance.ready = True
    submit(scheduler, 1)  # waits for company: the delay timer replaces the timeout's
    scheduler._loop.advance(0.06)
    assert instance.ran == [[1]]
    instance.ready = False  # busy from now on
    late = submit(scheduler, 2)
    scheduler._loop.advance(0.2)  # past its queue timeout while the instance is busy
    assert late.done and late.future.result().error.message == "Request timeout expired"


async def test_a_cancelled_caller_does_not_hold_back_the_responses_ordered_after_it():
    from pbserve.core.types import InferResponse

    scheduler, instance = scheduler_for("""
        name: "m" max_batch_size: 2
        dynamic_batching { preserve_ordering: true }""")
    instance.ready = True
    first, second = submit(scheduler, 1), submit(scheduler, 2)
    assert instance.ran == [[1], [2]]
    first.future.cancel()  # its client went away (the awaiting task was cancelled)
    second.deliver(InferResponse("m", "1", "2"))
    assert second.future.done() and second.future.result().id == "2"
    first.deliver(InferResponse("m", "1", "1"))  # released unread, as before


async def test_a_priority_level_keeps_its_own_queue_policy_while_its_queue_is_empty():
    scheduler, instance = scheduler_for("""
        name: "m" max_batch_size: 1
        dynamic_batching { priority_levels: 2 default_priority_level: 2
            priority_queue_policy { key: 1 value: { max_queue_size: 1 } } }""")
    first = submit(scheduler, 1, priority=1)  # level 1 was empty until now
    second = submit(scheduler, 2, priority=1)
    assert not first.done
    assert second.done and second.future.result().error.code.name == "UNAVAILABLE"
    assert "Exceeds maximum queue size" in second.future.result().error.message


async def test_a_requeued_request_keeps_its_queue_timeout():
    """A request that left the queue and came back unrun (a dead stub's queued batch,
    /dev/shm full) is rejected when the timeout it was queued with ends."""
    scheduler, instance = scheduler_for("""
        name: "m" max_batch_size: 1
        dynamic_batching { default_queue_policy { default_timeout_microseconds: 100000 } }""")
    instance.ready = True
    first = submit(scheduler, 1)
    instance.ready = False
    scheduler._loop.advance(0.05)
    scheduler.requeue([first])  # it never ran
    scheduler._loop.advance(0.06)
    assert first.done and first.future.result().error.message == "Request timeout expired"
    assert first.future.result().error.code.name == "UNAVAILABLE"


async def test_a_request_requeued_after_its_timeout_is_rejected_or_delayed():
    for action, ran in (("REJECT", [[2]]), ("DELAY", [[2], [1]])):
        scheduler, instance = scheduler_for(f"""
            name: "m" max_batch_size: 1
            dynamic_batching {{ default_queue_policy {{
                timeout_action: {action} default_timeout_microseconds: 100000 }} }}""")
        instance.ready = True
        first = submit(scheduler, 1)
        instance.ready = False
        instance.ran.clear()
        scheduler._loop.advance(0.05)
        submit(scheduler, 2)
        scheduler._loop.advance(0.06)
        scheduler.requeue([first])  # back after its timeout: behind 2, or rejected
        assert first.done == (action == "REJECT")
        instance.ready = True
        for _ in range(2):
            scheduler.on_idle(instance)
        assert instance.ran == ran, action


def failures(server, model: str) -> dict[str, int]:
    """nv_inference_request_failure of `model`, by Triton's reason label."""
    with urllib.request.urlopen(server.metrics_url, timeout=5) as reply:
        text = reply.read().decode()
    return {reason: int(float(count)) for reason, count in re.findall(
        rf'nv_inference_request_failure{{model="{model}",reason="(\w+)",version="1"}} (\S+)',
        text)}


def test_a_request_timed_out_in_the_queue_is_a_rejected_failure(server, tmp_path):
    before = failures(server, "queue_timeout")
    assert set(before) == {"REJECTED", "CANCELED", "BACKEND", "OTHER"}
    gate = Gate(tmp_path)
    client = server.http_client(concurrency=2, network_timeout=WAIT_S)
    first = client.async_infer("queue_timeout", [int_input(1)], parameters=gate.parameters)
    try:
        gate.wait_started()
        with pytest.raises(InferenceServerException, match="Request timeout expired"):
            client.infer("queue_timeout", [int_input(2)])
    finally:
        gate.open()
    first.get_result(timeout=WAIT_S)
    after = failures(server, "queue_timeout")
    assert after == {**before, "REJECTED": before["REJECTED"] + 1}


def test_batch_stats_count_the_batch_that_ran_not_the_requests(server):
    """One request of batch 3 makes batch_gather's preferred batch by itself: Triton
    reports an execution of batch size 3, not 1."""
    client = server.http_client(network_timeout=WAIT_S)

    def executions() -> dict[int, int]:
        stats = client.get_inference_statistics("batch_gather")["model_stats"][0]
        return {int(b["batch_size"]): int(b["compute_infer"]["count"])
                for b in stats["batch_stats"]}

    before = executions()
    result = client.infer("batch_gather", [http_input("IN", np.array([[1], [2], [3]], np.int32))])
    assert result.as_numpy("REQUESTS_IN_EXECUTE")[0][0] == 1
    after = executions()
    assert after.get(3, 0) == before.get(3, 0) + 1
    assert after.get(1, 0) == before.get(1, 0)


def test_requests_of_one_turn_of_the_loop_are_batched_with_one_choice():
    """A batcher with a queue delay chooses its batch once at the end of the turn of the
    loop its requests came in (Scheduler._dispatch_soon), not once a request."""
    import asyncio

    import uvloop
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    from pbserve.core.pending import PendingRequest
    from pbserve.core.scheduling.scheduler import Scheduler
    from pbserve.core.types import InferRequest

    cfg = text_format.Parse("""name: "m" max_batch_size: 4
        dynamic_batching { max_queue_delay_microseconds: 100000 }""", mc.ModelConfig())

    async def run() -> tuple[list, int]:
        scheduler = Scheduler(cfg, PlacedAdmission())
        instance = FakeInstance()
        instance.ready = True
        scheduler.instances = [instance]
        choices = 0
        take = scheduler._take_batch

        def counted():
            nonlocal choices
            choices += 1
            return take()
        scheduler._take_batch = counted
        for i in range(4):
            scheduler.submit(PendingRequest(i, InferRequest("m", id=str(i)), (), [], 1,
                                            lambda blocks: None, False))
        assert instance.ran == []  # not before the turn ends
        await asyncio.sleep(0)
        scheduler.close()
        return instance.ran, choices

    loop = uvloop.new_event_loop()
    try:
        ran, choices = loop.run_until_complete(run())
    finally:
        loop.close()
    assert ran == [[0, 1, 2, 3]] and choices == 1
