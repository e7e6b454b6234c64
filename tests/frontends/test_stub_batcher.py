"""A dynamic batcher in the stub (stub/batcher.py): with frontend processes, the requests of
a batching model with one instance go from the frontends to its stub, which batches them
itself and answers each frontend; the core hears only what the batches add to the
statistics. Driven as a user would: a real server with `--frontend-processes 2`, real
stubs, tritonclient."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from client_inputs import infer_at_once
from held_model import HELD, answered_by_another_stub, held_x
from model_files import write
from pbserve.testing import running_server, stub_pids
from polling import wait_for

CONFIG = (
    'backend: "python"\nmax_batch_size: 16\n'
    'dynamic_batching { max_queue_delay_microseconds: 20000 }\n'
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }, '
    '{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]\n')


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stub_batcher")
    repo = tmp / "repo"
    for name in ("held", "unloaded"):
        write(repo / name / "1" / "model.py", HELD)
        write(repo / name / "config.pbtxt", CONFIG +
              f'parameters {{ key: "hold" value {{ string_value: "{tmp / name}.hold" }} }}\n'
              f'parameters {{ key: "seen" value {{ string_value: "{tmp / name}.seen" }} }}\n')
    with running_server(repo, log_path=tmp / "server.log",
                        args=["--frontend-processes", "2", "--model-control-mode",
                              "explicit", "--load-model", "*"]) as srv:
        srv.tmp = tmp
        yield srv


def _many(server, values: list[float], model: str = "held", **client_args) -> list:
    """One request a value, all at once (client_inputs.infer_at_once)."""
    return infer_at_once(lambda: server.http_client(**client_args), model,
                         [held_x(value) for value in values])


def _learn_routes(server, model: str = "held") -> None:
    """Requests on fresh connections until both frontends have asked the model's route
    (a first request of a frontend goes through the core)."""
    for _ in range(3):
        _many(server, [1.0] * 4, model)


def _stats(server, model: str = "held") -> dict:
    (entry,) = server.http_client().get_inference_statistics(model)["model_stats"]
    return entry


def _seen(server, model: str = "held") -> list[int]:
    path = server.tmp / f"{model}.seen"
    return [int(n) for n in path.read_text().split()] if path.exists() else []


def _held(server, model: str = "held"):
    """The model's next batches wait until the returned function is called; the
    batches seen so far are forgotten."""
    (server.tmp / f"{model}.seen").unlink(missing_ok=True)
    hold = server.tmp / f"{model}.hold"
    hold.touch()
    return lambda: hold.unlink(missing_ok=True)


def _answers(results: list, values: list[float]) -> None:
    for value, result in zip(values, results):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("Y"), np.full((1, 4), 2 * value))


@contextlib.contextmanager
def _behind_a_running_batch(server):
    """A batch of one request runs, held, while the block sends more with `later(values,
    **client_args)` (each in the background; it returns the list their results fill):
    they wait in the stub's queue. On leaving the block the batch is let go and every
    request sent has its answer; the held batch's own is checked. `_seen` then tells
    the batches that ran after it."""
    release = _held(server)
    threads: list[threading.Thread] = []

    def later(values: list[float], **client_args) -> list:
        results: list = []
        thread = threading.Thread(
            target=lambda: results.extend(_many(server, values, **client_args)))
        thread.start()
        threads.append(thread)
        return results
    first = later([1.0])
    try:
        wait_for(lambda: _seen(server) == [1], "the first batch to run", 10)
        (server.tmp / "held.seen").unlink()
        yield later
    finally:
        release()
        for thread in threads:
            thread.join(30)
    _answers(first, [1.0])


def test_the_batch_grows_while_the_instance_runs_and_is_counted_at_once(server):
    """What comes while a batch runs forms the next batch (as Triton's batcher grows its
    next payload), and a statistics call made once the answers are in counts it."""
    _learn_routes(server)
    before = _stats(server)
    values = [float(i) for i in range(2, 10)]
    with _behind_a_running_batch(server) as later:
        rest = later(values)
        time.sleep(0.5)  # the eight wait in the stub's queue
    _answers(rest, values)
    assert _seen(server) == [8]
    after = _stats(server)
    assert int(after["inference_count"]) == int(before["inference_count"]) + 9
    assert int(after["execution_count"]) == int(before["execution_count"]) + 2
    success = after["inference_stats"]["success"]
    assert int(success["count"]) == int(before["inference_stats"]["success"]["count"]) + 9
    assert int(after["inference_stats"]["queue"]["count"]) == int(success["count"])
    eights = [b for b in after["batch_stats"] if int(b["batch_size"]) == 8]
    assert eights and int(eights[0]["compute_infer"]["count"]) >= 1


def test_requests_are_batched_and_answered_while_the_core_process_is_stopped(server):
    """The core is out of the batcher's path: with the server's own process stopped
    (SIGSTOP), requests to a frontend that knows the route are batched and answered
    (one gRPC connection: one frontend)."""
    client = server.grpc_client()
    x = np.full((1, 4), 1.0, np.float32)

    def inputs(value: float) -> list:
        tensor = grpcclient.InferInput("X", [1, 4], "FP32")
        tensor.set_data_from_numpy(x * value)
        return [tensor]
    client.infer("held", inputs(1.0))  # this connection's frontend knows the route
    release = _held(server)
    results: queue.Queue = queue.Queue()
    os.kill(server.pid, signal.SIGSTOP)
    try:
        # within the route's second (frontends/direct.py ROUTE_TTL_S)
        client.async_infer("held", inputs(0.0),
                           lambda result, error: results.put((0.0, result, error)))
        wait_for(lambda: _seen(server) == [1], "the first batch to run", 10)
        for value in (1.0, 2.0, 3.0):
            client.async_infer("held", inputs(value),
                               lambda result, error, v=value: results.put((v, result, error)))
        time.sleep(0.3)
        release()
        answers = [results.get(timeout=10) for _ in range(4)]
    finally:
        release()
        os.kill(server.pid, signal.SIGCONT)
        client.close()
    for value, result, error in answers:
        assert error is None, error
        np.testing.assert_array_equal(result.as_numpy("Y"), x * value * 2)
    assert _seen(server) == [1, 3]


def test_a_failed_batch_fails_each_of_its_requests_and_no_other(server):
    _learn_routes(server)
    before = _stats(server)
    with _behind_a_running_batch(server) as later:
        results = later([2.0, -1.0, 3.0])
        time.sleep(0.5)
    assert _seen(server) == [3]
    for result in results:
        assert isinstance(result, Exception) and "a negative X" in str(result), result
    _answers(_many(server, [4.0]), [4.0])
    after = _stats(server)
    assert int(after["inference_stats"]["fail"]["count"]) == \
        int(before["inference_stats"]["fail"]["count"]) + 3


def test_a_client_that_leaves_while_queued_is_not_run_and_harms_no_other(server):
    _learn_routes(server)
    with _behind_a_running_batch(server) as later:
        left = _many(server, [5.0], network_timeout=0.3)  # leaves while held
        assert isinstance(left[0], Exception)
        time.sleep(0.3)  # its cancellation reaches the stub through the core
        staying = later([2.0, 3.0])
        time.sleep(0.3)
    _answers(staying, [2.0, 3.0])
    assert _seen(server) == [2]  # the one that left did not run
    wait_for(lambda: int(_stats(server)["inference_stats"]["fail"]["count"]) >= 1,
             "the cancelled request counted", 10)


def test_a_stub_killed_with_requests_queued_fails_them_and_its_successor_answers(server):
    _learn_routes(server)
    client = server.http_client()
    pid = int(client.infer("held", held_x(1.0)).as_numpy("PID")[0])
    assert pid in stub_pids(server.pid)
    release = _held(server)
    results: list = []
    runner = threading.Thread(target=lambda: results.extend(_many(server, [1.0] * 4)))
    try:
        runner.start()
        time.sleep(0.5)  # one batch runs (held), the others wait in its queue
        os.kill(pid, signal.SIGKILL)
        runner.join(30)
    finally:
        release()
    assert all(isinstance(r, Exception) and "is not healthy" in str(r) for r in results), \
        results

    wait_for(lambda: answered_by_another_stub(client, pid), "a new stub", 30)
    for _ in range(3):  # before and after the frontends learn the new stub's route
        _answers(_many(server, [3.0] * 4), [3.0] * 4)
        time.sleep(0.6)
    client.close()


def test_an_unload_runs_what_waits_in_the_stubs_queue_first(server):
    _learn_routes(server, "unloaded")
    release = _held(server, "unloaded")
    results: list = []
    values = [1.0, 2.0, 3.0]
    runner = threading.Thread(target=lambda: results.extend(_many(server, values,
                                                                  "unloaded")))
    try:
        runner.start()
        time.sleep(0.5)  # one batch runs (held), the others wait in its queue
        unloading = threading.Thread(
            target=lambda: server.http_client().unload_model("unloaded"))
        unloading.start()
        time.sleep(0.3)
    finally:
        release()
    runner.join(30)
    unloading.join(30)
    _answers(results, values)
    assert sum(_seen(server, "unloaded")) >= 3
