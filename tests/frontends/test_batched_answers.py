"""A dynamic batcher's requests from frontend processes, where the core keeps the batcher
(here: one with a queue policy; a simpler one is the stub's, test_stub_batcher.py): the core
schedules them, and the stub answers each request to the frontend that sent it (stub/stub.py
`_answer_frontends`), the core hearing only that it is done. Driven as a user would: a
real server with `--frontend-processes 2`, real stubs, tritonclient."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from client_inputs import infer_at_once
from held_model import HELD, answered_by_another_stub, held_x
from model_files import write
from pbserve.testing import frontend_pids, running_server, stub_pids
from polling import wait_for

# Doubles X of any length, and answers the size of the batch it was in: a batcher that
# compares the inputs' shapes (a variable dim) batches equal shapes only.
SHAPED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2),
            pb_utils.Tensor("N", np.array([[len(requests)]], np.int64))])
            for r in requests]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batched")
    repo = tmp / "repo"
    write(repo / "held" / "1" / "model.py", HELD)
    write(repo / "held" / "config.pbtxt",
          'backend: "python"\nmax_batch_size: 16\n'
          # (a queue policy: the core's batcher, not the stub's: test_stub_batcher.py)
          'dynamic_batching { max_queue_delay_microseconds: 20000 '
          'default_queue_policy { max_queue_size: 100 } }\n'
          'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
          'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }, '
          '{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
          f'parameters {{ key: "hold" value {{ string_value: "{tmp / "hold"}" }} }}\n'
          f'parameters {{ key: "seen" value {{ string_value: "{tmp / "seen"}" }} }}\n')
    write(repo / "shaped" / "1" / "model.py", SHAPED)
    write(repo / "shaped" / "config.pbtxt",
          'backend: "python"\nmax_batch_size: 16\n'
          'dynamic_batching { max_queue_delay_microseconds: 50000 }\n'
          'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
          'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }, '
          '{ name: "N" data_type: TYPE_INT64 dims: [ 1 ] } ]\n')
    with running_server(repo, log_path=tmp / "server.log",
                        args=["--frontend-processes", "2"]) as srv:
        srv.tmp = tmp
        yield srv


def _many(client_of, count: int, answered: list | None = None) -> list:
    """`count` requests at once, request i doubling i (client_inputs.infer_at_once)."""
    return infer_at_once(client_of, "held", [held_x(float(i)) for i in range(count)], answered)


def _stats(server) -> dict:
    (entry,) = server.http_client().get_inference_statistics("held")["model_stats"]
    return entry


def test_a_batch_is_answered_while_the_core_process_is_stopped(server):
    """A batch the core sent the stub is answered to each request's frontend by the
    stub: with the server's own process stopped (SIGSTOP) while the batch runs, its
    clients have their answers (the rest wait for the core); the statistics count each
    request once the core runs again."""
    hold, seen = server.tmp / "hold", server.tmp / "seen"
    _many(server.http_client, 2)  # the frontends learn the stub's route
    before = int(_stats(server)["inference_count"])
    seen.unlink(missing_ok=True)
    hold.touch()
    answered: list = []
    results: list = []
    runner = threading.Thread(
        target=lambda: results.extend(_many(server.http_client, 8, answered)))
    runner.start()
    try:
        wait_for(seen.exists, "a batch to run", 10)
        time.sleep(0.2)  # the rest of the requests reach the core's queue
        os.kill(server.pid, signal.SIGSTOP)
        try:
            first = int(seen.read_text().split()[0])  # the running batch's size
            hold.unlink()
            wait_for(lambda: len(answered) >= first, "the batch's answers", 10)
        finally:
            os.kill(server.pid, signal.SIGCONT)
    finally:
        hold.unlink(missing_ok=True)
        runner.join(30)
    assert len(results) == 8
    for i, result in enumerate(results):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("Y"), np.full((1, 4), 2.0 * i))
    wait_for(lambda: int(_stats(server)["inference_count"]) == before + 8,
             "the statistics", 10)
    assert int(_stats(server)["inference_stats"]["success"]["count"]) == before + 8


def test_many_clients_through_both_frontends_get_their_own_answers(server):
    results = _many(server.http_client, 32)
    for i, result in enumerate(results):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("Y"), np.full((1, 4), 2.0 * i))
        response = result.get_response()
        assert (response["model_name"], response["model_version"]) == ("held", "1")
    entry = _stats(server)
    assert int(entry["execution_count"]) < int(entry["inference_count"])  # batched


def test_a_batcher_that_compares_shapes_batches_each_shape_apart(server):
    """Its requests go to the core whole (the batcher needs their shapes: not QUEUE),
    and still are answered by the stub to their frontends."""
    def one(i: int) -> object:
        x = np.full((1, 2 + i % 2), float(i), np.float32)
        tensor = httpclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        try:
            return x, server.http_client().infer("shaped", [tensor])
        except Exception as err:  # noqa: BLE001 - the test looks at it
            return x, err
    for _ in range(2):  # before and after the frontends learn the model's route
        results: list = [None] * 8
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, one(i)))
                   for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        for x, result in results:
            assert not isinstance(result, Exception), result
            np.testing.assert_array_equal(result.as_numpy("Y"), x * 2)
            assert 1 <= int(result.as_numpy("N")[0][0]) <= 4  # one shape's requests only
        time.sleep(0.6)


def test_a_bad_request_is_refused_in_the_cores_words(server):
    """A frontend validates a request the core only queues (QUEUE) as the core would."""
    tensor = httpclient.InferInput("X", [1, 5], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 5), np.float32))
    client = server.http_client()
    client.infer("held", held_x(1.0))  # the frontend knows the route
    for _ in range(2):
        with pytest.raises(Exception, match=r"unexpected shape for input 'X' for model "
                                            r"'held'\. Expected \[-1,4\], got \[1,5\]"):
            client.infer("held", [tensor])
    assert client.infer("held", held_x(3.0)).as_numpy("Y")[0][0] == 6.0
    client.close()


def test_a_stub_killed_under_a_batch_fails_it_and_its_successor_answers(server):
    """The batch's requests get the core's error; the new stub is not one the frontends
    read yet, so the core answers its first requests itself, then routes them on."""
    hold = server.tmp / "hold"
    client = server.http_client()
    pid = int(client.infer("held", held_x(1.0)).as_numpy("PID")[0])
    assert pid in stub_pids(server.pid)
    hold.touch()
    results: list = []
    runner = threading.Thread(target=lambda: results.extend(_many(server.http_client, 4)))
    runner.start()
    try:
        wait_for(lambda: (server.tmp / "seen").exists(), "a batch to run", 10)
        time.sleep(0.3)
        os.kill(pid, signal.SIGKILL)
        runner.join(30)
    finally:
        hold.unlink(missing_ok=True)
    assert all(isinstance(r, Exception) and "is not healthy" in str(r) for r in results), \
        results

    wait_for(lambda: answered_by_another_stub(client, pid), "a new stub", 30)
    for _ in range(3):  # before and after the frontends learn the new stub's route
        results = _many(server.http_client, 4)
        assert not any(isinstance(r, Exception) for r in results), results
        time.sleep(0.6)
    client.close()


def test_a_client_that_leaves_a_running_batch_harms_no_other(server):
    hold = server.tmp / "hold"
    hold.touch()
    leaving = server.http_client(network_timeout=0.5)
    staying: list = []
    runner = threading.Thread(target=lambda: staying.extend(_many(server.http_client, 3)))
    try:
        runner.start()
        with pytest.raises(Exception):
            leaving.infer("held", held_x(9.0))
    finally:
        hold.unlink(missing_ok=True)
        runner.join(30)
        leaving.close()
    for i, result in enumerate(staying):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("Y"), np.full((1, 4), 2.0 * i))


def test_a_frontend_killed_under_batched_load_is_replaced_and_the_other_serves_on(server):
    """SIGKILL one frontend while 16 clients send batched requests: the clients on the
    other go on, only the killed one's requests fail, and the new frontend (its keys
    unknown to the stubs until it asks a route) is answered too."""
    stop = threading.Event()
    counts = {"ok": 0, "failed": 0}
    lock = threading.Lock()

    def client_loop(i: int) -> None:
        client = server.http_client()
        while not stop.is_set():
            try:
                result = client.infer("held", held_x(float(i)))
                np.testing.assert_array_equal(result.as_numpy("Y"), np.full((1, 4), 2.0 * i))
                with lock:
                    counts["ok"] += 1
            except Exception:  # noqa: BLE001 - the killed frontend's connection
                with lock:
                    counts["failed"] += 1
                client.close()
                client = server.http_client()
        client.close()

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: counts["ok"] >= 100, "requests under way", 20)
        before = frontend_pids(server.pid)
        os.kill(before[0], signal.SIGKILL)
        wait_for(lambda: len(now := frontend_pids(server.pid)) == 2 and before[0] not in now,
                 "a new frontend", 20)
        with lock:
            ok_at_restart = counts["ok"]
        wait_for(lambda: counts["ok"] - ok_at_restart > 200, "answers after it", 20)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert counts["failed"] <= 16  # at most each client's request in flight on it
    new = [pid for pid in frontend_pids(server.pid) if pid not in before]
    assert len(new) == 1
    # the new frontend answers too: every connection of a fresh client reaches one of two
    results = _many(server.http_client, 16)
    assert not any(isinstance(r, Exception) for r in results), results
