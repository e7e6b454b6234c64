"""The sequence batcher against a real server: routing, control tensors, Triton's
errors, string correlation ids, pbserve's eviction notice, rescheduling."""

from __future__ import annotations

import queue
import shutil
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from client_inputs import grpc_input, http_input
from pbserve.testing import running_server
from polling import wait_for
from fakes import fake_clock

TEST_MODELS = Path(__file__).resolve().parents[1] / "models"
MODELS = ("seq_pid", "seq_string", "seq_evict", "seq_evict_idle", "seq_evict_unload",
          "seq_iterative", "seq_iterative_stream", "resched_plain")
WAIT_S = 20.0


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.fixture(scope="module", params=[1, 2], ids=["in-process", "2-frontend-processes"])
def server(request, tmp_path_factory):
    """One process, and two frontend processes (a sequence batcher's stub answers each
    request to its frontend: stub/stub.py `_answer_frontends`)."""
    root = tmp_path_factory.mktemp("sequence")
    repo = root / "models"
    for name in MODELS:
        shutil.copytree(TEST_MODELS / name, repo / name)
    frontends = ["--frontend-processes", "2"] if request.param == 2 else []
    with running_server(repo, log_path=root / "server.log",
                        args=["--model-control-mode", "explicit", "--load-model", "*",
                              *frontends]) as srv:
        yield srv


@pytest.fixture
def http(server):
    client = server.http_client(concurrency=4, network_timeout=WAIT_S)
    yield client
    client.close()


def pid_step(client, sid, value, start=False, end=False):
    return client.infer("seq_pid", [http_input("VALUE", np.array([value], np.int32))],
                        sequence_id=sid, sequence_start=start, sequence_end=end)


def test_a_sequence_runs_on_one_instance_and_the_backlog_waits_for_a_slot(http):
    a = pid_step(http, 101, 1, start=True)
    b = pid_step(http, 102, 10, start=True)
    pid_a, pid_b = int(a.as_numpy("PID")[0]), int(b.as_numpy("PID")[0])
    assert pid_a != pid_b  # one slot per instance: the two sequences spread
    # Both slots are held: a third sequence waits in the backlog for one to end.
    c = http.async_infer("seq_pid", [http_input("VALUE", np.array([100], np.int32))],
                         sequence_id=103, sequence_start=True)
    for step, (value_a, value_b) in enumerate(((2, 20), (3, 30))):
        end = step == 1
        a = pid_step(http, 101, value_a, end=end)
        b = pid_step(http, 102, value_b)
        assert int(a.as_numpy("PID")[0]) == pid_a
        assert int(b.as_numpy("PID")[0]) == pid_b
    assert a.as_numpy("SUM")[0] == 6 and b.as_numpy("SUM")[0] == 60
    c_result = c.get_result(timeout=WAIT_S)
    assert int(c_result.as_numpy("PID")[0]) == pid_a  # it got the slot 101 released
    assert c_result.as_numpy("SUM")[0] == 100
    for sid in (102, 103):
        pid_step(http, sid, 0, end=True)
    # One-request sequences give their slot back too (two slots, three sequences).
    for sid in (121, 122, 123):
        assert pid_step(http, sid, 5, start=True, end=True).as_numpy("SUM")[0] == 5


def test_control_tensors_have_the_configured_types_and_values(http):
    first = pid_step(http, 111, 1, start=True)
    last = pid_step(http, 111, 1, end=True)
    for result, start, end in ((first, 1.0, False), (last, 0.0, True)):
        assert result.as_numpy("START_OUT").dtype == np.float32
        assert result.as_numpy("START_OUT").tolist() == [start]
        assert result.as_numpy("END_OUT").dtype == np.bool_
        assert result.as_numpy("END_OUT").tolist() == [end]
        assert result.as_numpy("READY_OUT").tolist() == [7]
        assert result.as_numpy("CORRID_OUT").dtype == np.uint64
        assert result.as_numpy("CORRID_OUT").tolist() == [111]
    assert last.as_numpy("SUM")[0] == 2


def test_requests_outside_a_started_sequence_get_tritons_errors(http):
    value = [http_input("VALUE", np.array([1], np.int32))]
    with pytest.raises(InferenceServerException) as caught:
        http.infer("seq_pid", value)
    assert caught.value.message() == ("inference request to model 'seq_pid' must specify a "
                                      "non-zero or non-empty correlation ID")
    with pytest.raises(InferenceServerException) as caught:
        http.infer("seq_pid", value, sequence_id=555)
    assert caught.value.message() == (
        "inference request for sequence 555 to model 'seq_pid' must specify the START flag "
        "on the first request of the sequence")
    # After END the id is free: continuing it is refused the same way.
    pid_step(http, 556, 1, start=True, end=True)
    with pytest.raises(InferenceServerException) as caught:
        http.infer("seq_pid", value, sequence_id=556)
    assert "must specify the START flag" in caught.value.message()


def test_string_correlation_ids_reach_the_model(server, http):
    def step(sid, value, start=False, end=False):
        return http.infer("seq_string", [http_input("VALUE", np.array([[value]], np.int32))],
                          sequence_id=sid, sequence_start=start, sequence_end=end)

    step("alpha", 1, start=True)
    step("beta", 10, start=True)
    alpha = step("alpha", 2, end=True)
    with server.grpc_client() as grpc:
        beta = grpc.infer("seq_string", [grpc_input("VALUE", np.array([[20]], np.int32))],
                          sequence_id="beta", sequence_end=True, client_timeout=WAIT_S)
    for result, sid, total in ((alpha, b"alpha", 3), (beta, b"beta", 30)):
        assert result.as_numpy("SUM").tolist() == [[total]]
        assert result.as_numpy("CORRID_OUT").reshape(-1)[0] == sid
        assert result.as_numpy("REQUEST_CORRID").reshape(-1)[0] == sid


def test_an_idle_sequence_ends_and_the_model_is_told(http, tmp_path):
    log = tmp_path / "evictions"
    params = {"log": str(log)}
    one = [http_input("IN", np.array([1], np.int32))]
    http.infer("seq_evict_idle", one, sequence_id=201, sequence_start=True, parameters=params)
    http.infer("seq_evict_idle", one, sequence_id=202, sequence_start=True, sequence_end=True,
               parameters=params)
    wait_for(lambda: "201 idle_timeout" in read(log), "the idle_timeout notice")
    assert read(log) == "201 idle_timeout\n"  # not the sequence that ended with END
    with pytest.raises(InferenceServerException) as caught:
        http.infer("seq_evict_idle", one, sequence_id=201, parameters=params)
    assert "must specify the START flag" in caught.value.message()


def test_a_closed_stream_ends_its_sequence_and_the_model_is_told(server, tmp_path):
    log = tmp_path / "evictions"
    events: queue.Queue = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: events.put((result, error)),
                        stream_timeout=WAIT_S)
    try:
        client.async_stream_infer(
            "seq_evict", [grpc_input("IN", np.array([1], np.int32))], sequence_id=301,
            sequence_start=True, parameters={"log": str(log), "wait_cancel": True})
        wait_for(Path(str(log) + ".running").exists, "the request to run")
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    wait_for(lambda: "301 client_gone" in read(log), "the client_gone notice")


def test_unload_ends_live_sequences_and_the_model_is_told(server, http, tmp_path):
    log = tmp_path / "evictions"
    params = {"log": str(log)}
    one = [http_input("IN", np.array([1], np.int32))]
    http.infer("seq_evict_unload", one, sequence_id=401, sequence_start=True,
               parameters=params)
    http.infer("seq_evict_unload", one, sequence_id=402, sequence_start=True,
               sequence_end=True, parameters=params)
    http.unload_model("seq_evict_unload")
    wait_for(lambda: "401 unload" in read(log), "the unload notice")
    assert read(log) == "401 unload\n"


def test_iterative_requests_are_rescheduled_until_done(http):
    wants = (2, 3, 5)
    pending = [http.async_infer("seq_iterative",
                                [http_input("N", np.array([[n]], np.int32))]) for n in wants]
    results = [p.get_result(timeout=WAIT_S) for p in pending]
    corrids = set()
    for want, result in zip(wants, results):
        assert result.as_numpy("PASSES").tolist() == [[want]]
        # The batcher gave it a correlation id and START, later passes neither flag.
        assert result.as_numpy("FLAGS").tolist() == [[1, 0]]
        corrids.add(int(result.as_numpy("CORRID")[0][0]))
    assert len(corrids) == 3 and 0 not in corrids


def test_rescheduling_without_an_iterative_sequence_fails_with_tritons_error(http):
    with pytest.raises(InferenceServerException) as caught:
        http.infer("resched_plain", [http_input("N", np.array([[2]], np.int32))])
    assert caught.value.message() == (
        "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model "
        "is not configured to handle such a flag.")


def test_a_decoupled_model_streams_one_response_per_rescheduled_pass(server):
    events: queue.Queue = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: events.put((result, error)),
                        stream_timeout=WAIT_S)
    passes = []
    try:
        client.async_stream_infer("seq_iterative_stream",
                                  [grpc_input("N", np.array([3], np.int32))],
                                  request_id="r", enable_empty_final_response=True)
        while True:
            result, error = events.get(timeout=WAIT_S)
            assert error is None, error
            final = result.get_response().parameters.get("triton_final_response")
            if result.as_numpy("PASS") is not None:
                passes.append(int(result.as_numpy("PASS")[0]))
            if final is not None and final.bool_param:
                break
    finally:
        client.stop_stream()
        client.close()
    assert passes == [1, 2, 3]


# -- the batcher's bookkeeping, on a hand-driven clock (no server) ------------------------

class FakeInstance:
    ready = True

    def __init__(self) -> None:
        self.ran: list[list[int]] = []
        self.terminated: list[tuple] = []

    def execute(self, batch) -> None:
        self.ran.append([p.key for p in batch])

    def sequence_terminated(self, correlation_id, reason) -> None:
        self.terminated.append((correlation_id, reason))


class NoControls:
    """An admission (scheduling/admission.py) that makes no control tensors."""

    def add_control_tensor(self, pending, name, datatype, shape, data) -> tuple:
        return ()


def batcher_for(config: str):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    from pbserve.core.scheduling.sequence_batcher import SequenceBatcher

    cfg = text_format.Parse(config, mc.ModelConfig())
    batcher = SequenceBatcher(cfg, NoControls())
    fake_clock(batcher)
    instance = FakeInstance()
    batcher.instances = [instance]
    return batcher, instance


def seq_submit(batcher, key: int, corrid: int | str = 0, flags: int = 0):
    from pbserve.core.pending import PendingRequest
    from pbserve.core.types import InferRequest

    request = InferRequest("m", id=str(key), correlation_id=corrid, flags=flags)
    msg = (key, request.id, corrid, flags, "{}", 0, (), (), False)
    pending = PendingRequest(key, request, msg, [], 1, lambda blocks: None, False)
    batcher.submit(pending)
    return pending


async def test_a_reschedule_refused_after_an_idle_timeout_gives_the_slot_back():
    batcher, instance = batcher_for("""
        name: "m" max_batch_size: 1
        sequence_batching { iterative_sequence: true max_sequence_idle_microseconds: 100000 }
        """)
    first = seq_submit(batcher, 1)
    assert instance.ran == [[1]]
    instance.ready = False
    batcher._loop.advance(0.2)  # its execute outlasts the idle timeout: the sequence ends
    batcher.reschedule(first)  # too late to run again: refused
    assert first.done
    instance.ready = True
    batcher.on_idle(instance)
    assert instance.terminated == [(1, "idle_timeout")]
    assert batcher._entries == {}
    seq_submit(batcher, 2)  # the only slot is free again
    assert instance.ran == [[1], [2]]


async def test_a_batch_whose_stub_died_before_it_ran_fails_unavailable():
    """Under the rate limiter a batch waits (staged) for its resources; a stub that dies
    meanwhile hands it back (instance.py `stub_lost` with requeue): it fails, and the
    sequence goes on on its slot once the instance is back."""
    from pbserve.errors import ErrorCode

    batcher, instance = batcher_for("""
        name: "m" max_batch_size: 1
        sequence_batching { max_sequence_idle_microseconds: 100000 }
        """)
    first = seq_submit(batcher, 1, corrid=7, flags=1)
    assert instance.ran == [[1]]
    instance.ready = False
    batcher.requeue([first])
    response = first.future.result()
    assert first.done and response.error.code == ErrorCode.UNAVAILABLE
    assert "stopped before the request ran" in response.error.message
    instance.ready = True
    batcher.on_idle(instance)
    seq_submit(batcher, 2, corrid=7)
    assert instance.ran == [[1], [2]]
