"""Decoupled models, `async def execute` and streaming, end to end: a real server,
real stubs, tritonclient over gRPC (streams, sync and aio) and HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import json
import queue
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import running_server

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "models" / "examples"
TEST_MODELS = Path(__file__).resolve().parents[1] / "models"
EXIT_TIMEOUT_S = 5
MODELS = ["repeat", "async_stream", "inflight_counter", "coroutine_raises",
          "decoupled_misuse", "default_mode_sender"]
WAIT_S = 10.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("decoupled") / "server.log"
    args = ["--model-control-mode", "explicit", "--exit-timeout-secs", str(EXIT_TIMEOUT_S)]
    for name in MODELS:
        args += ["--load-model", name]
    with running_server(EXAMPLES, TEST_MODELS, args=args, log_path=log) as srv:
        yield srv


def grpc_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def text(value: str) -> np.ndarray:
    return np.array([value.encode()], np.object_)


class Stream:
    """One ModelStreamInfer call of the sync client; `until_done` collects responses
    until every request got its final response (empty finals are asked for) or an
    error."""

    def __init__(self, server) -> None:
        self.client = server.grpc_client()
        self.results: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.results.put(
            (result, error)))

    def send(self, model: str, inputs: list, request_id: str) -> None:
        self.client.async_stream_infer(model, inputs, request_id=request_id,
                                       enable_empty_final_response=True)

    def until_done(self, count: int) -> list[tuple]:
        got, done = [], 0
        while done < count:
            result, error = self.results.get(timeout=WAIT_S)
            got.append((result, error))
            if error is not None or result.get_response().parameters[
                    "triton_final_response"].bool_param:
                done += 1
        return got

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def outputs(got: list[tuple], name: str) -> list:
    """The `name` output of every data response (flag-only finals have none)."""
    values = []
    for result, error in got:
        assert error is None, error
        array = result.as_numpy(name)
        if array is not None:
            values.append(array[0])
    return values


# -- the README's examples ----------------------------------------------------------------

def readme_snippets(section: str) -> list[str]:
    """The ```python blocks of one README section."""
    readme = (ROOT / "README.md").read_text()
    body = readme.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in body.split("```python\n")[1:]]


def test_readme_streaming_snippets_run_as_written(server):
    printed = []
    snippets = readme_snippets("Streaming (decoupled models)")
    assert len(snippets) == 2
    for code in snippets:
        assert "127.0.0.1:8001" in code
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code.replace("127.0.0.1:8001", server.grpc_url), "README", "exec"),  # noqa: S102
                 {"__name__": "readme"})
        printed.append(out.getvalue().splitlines())
    assert printed[0] == ["0 4", "1 3", "2 2", "3 1"]
    assert sorted(printed[1]) == sorted(f"{p} chunk {k}/3 of '{p}' "
                                        for p in ("hello", "world") for k in (1, 2, 3))


def test_readme_repeat_snippet_streams_one_response_per_element(server):
    client = server.grpc_client()
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put(error or result))
    i = grpcclient.InferInput("IN", [4], "INT32")
    i.set_data_from_numpy(np.array([4, 3, 2, 1], np.int32))
    d = grpcclient.InferInput("DELAY", [1], "UINT32")
    d.set_data_from_numpy(np.array([20], np.uint32))
    client.async_stream_infer("repeat", [i, d])
    got = []
    for _ in range(4):
        r = results.get(timeout=WAIT_S)
        assert not isinstance(r, InferenceServerException), r
        got.append((int(r.as_numpy("IDX")[0]), int(r.as_numpy("OUT")[0])))
    client.stop_stream()
    assert got == [(0, 4), (1, 3), (2, 2), (3, 1)]
    assert results.empty()  # no empty final response unless the request asks for it


def test_readme_async_stream_snippet_interleaves_requests_on_one_instance(server):
    async def run() -> list[tuple[str, str]]:
        client = grpcaio.InferenceServerClient(server.grpc_url)

        async def requests():
            for prompt in ["hello", "world"]:
                p = grpcaio.InferInput("PROMPT", [1], "BYTES")
                p.set_data_from_numpy(text(prompt))
                n = grpcaio.InferInput("CHUNKS", [1], "INT32")
                n.set_data_from_numpy(np.array([3], np.int32))
                yield {"model_name": "async_stream", "inputs": [p, n], "request_id": prompt}

        got = []
        try:
            async for result, error in client.stream_infer(requests()):
                assert error is None, error
                got.append((result.get_response().id, result.as_numpy("TEXT")[0].decode()))
        finally:
            await client.close()
        return got

    got = asyncio.run(asyncio.wait_for(run(), WAIT_S))
    for prompt in ["hello", "world"]:
        assert [t for i, t in got if i == prompt] == [
            f"chunk {k}/3 of '{prompt}' " for k in (1, 2, 3)]
    # Both ran at once: the second request's first chunk came before the first's last.
    ids = [i for i, _ in got]
    assert ids.index("world") < len(ids) - 1 - ids[::-1].index("hello")


# -- async execute ------------------------------------------------------------------------

def test_async_execute_runs_many_coroutines_at_once_on_one_instance(server):
    stream = Stream(server)
    try:
        for k in range(4):
            stream.send("inflight_counter", [grpc_input("TARGET", np.array([4], np.int32),
                                                        "INT32")], f"r{k}")
        got = stream.until_done(4)
    finally:
        stream.close()
    maxima = outputs(got, "MAX_INFLIGHT")
    assert len(maxima) == 4 and min(maxima) > 1
    assert set(maxima) == {4}
    assert len(set(outputs(got, "PID"))) == 1  # one instance, one stub process


def test_coroutine_exception_is_logged_fails_its_open_request_and_the_stub_lives_on(server):
    stream = Stream(server)
    try:
        stream.send("coroutine_raises", [grpc_input("FAIL", np.array([True]), "BOOL")],
                    "bad")
        got = stream.until_done(1)
        stream.send("coroutine_raises", [grpc_input("FAIL", np.array([False]), "BOOL")],
                    "good")
        after = stream.until_done(1)
    finally:
        stream.close()
    (first, no_error), (none, error) = got
    assert no_error is None and none is None
    assert "ValueError: coroutine_raises: failing on purpose" in error.message()
    assert "Failed to process the request(s) for model 'coroutine_raises" in error.message()
    log = server.log_text()
    assert "coroutine_raises: failing on purpose" in log
    assert "Traceback (most recent call last)" in log
    pids = outputs(after, "PID")
    assert pids == [first.as_numpy("PID")[0]]  # same stub process, request succeeded


# -- Triton's rules for responses -----------------------------------------------------------

def test_decoupled_execute_returning_responses_is_an_error(server):
    stream = Stream(server)
    try:
        stream.send("decoupled_misuse", [grpc_input("MODE", text("return_list"), "BYTES")],
                    "x")
        [(result, error)] = stream.until_done(1)
    finally:
        stream.close()
    assert result is None
    assert "decoupled mode and the execute function must return None" in error.message()


def test_sending_after_the_final_flag_is_refused(server):
    stream = Stream(server)
    try:
        stream.send("decoupled_misuse",
                    [grpc_input("MODE", text("send_after_final"), "BYTES")], "x")
        got = stream.until_done(1)
    finally:
        stream.close()
    assert outputs(got, "OUT") == [1]  # the response sent with FINAL, nothing after
    deadline = time.monotonic() + WAIT_S
    while "Response sender has been closed" not in server.log_text():
        assert time.monotonic() < deadline, "the refused send was not logged"
        time.sleep(0.05)


def test_non_decoupled_model_returning_the_wrong_number_of_responses_fails(server):
    client = server.http_client()
    mode = httpclient.InferInput("MODE", [1], "BYTES")
    mode.set_data_from_numpy(text("wrong_count"))
    with pytest.raises(InferenceServerException) as err:
        client.infer("default_mode_sender", [mode])
    assert "Number of InferenceResponse objects do not match the number of " \
           "InferenceRequest objects" in err.value.message()


@pytest.mark.parametrize("mode", ["sender_final", "sender_then_final"])
def test_non_decoupled_model_may_answer_through_the_response_sender(server, mode):
    client = server.http_client()
    tensor = httpclient.InferInput("MODE", [1], "BYTES")
    tensor.set_data_from_numpy(text(mode))
    for _ in range(2):  # the instance is free again after each
        result = client.infer("default_mode_sender", [tensor])
        assert result.as_numpy("OUT").tolist() == [7]


# -- HTTP ---------------------------------------------------------------------------------

def test_http_generate_stream_sends_one_event_per_response(server):
    connection = http.client.HTTPConnection(server.http_url, timeout=WAIT_S)
    try:
        connection.request("POST", "/v2/models/repeat/generate_stream",
                           body=json.dumps({"IN": [5, 6, 7], "DELAY": 5}),
                           headers={"Content-Type": "application/json"})
        reply = connection.getresponse()
        assert reply.status == 200
        assert reply.getheader("Content-Type", "").startswith("text/event-stream")
        body = reply.read().decode()
    finally:
        connection.close()
    events = [json.loads(line[len("data: "):]) for line in body.split("\n\n") if line]
    assert [(e["IDX"], e["OUT"]) for e in events] == [(0, 5), (1, 6), (2, 7)]
    assert all(e["model_name"] == "repeat" for e in events)


def test_unary_infer_on_a_decoupled_model_is_refused(server):
    tensor = httpclient.InferInput("IN", [2], "INT32")
    tensor.set_data_from_numpy(np.array([1, 2], np.int32))
    with pytest.raises(InferenceServerException) as err:
        server.http_client().infer("repeat", [tensor])
    assert "decoupled" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        server.grpc_client().infer("repeat", [grpc_input("IN", np.array([1, 2], np.int32),
                                                         "INT32")])
    assert "decoupled" in err.value.message()


# -- finalize -----------------------------------------------------------------------------

def test_unloading_cancels_pending_coroutines_and_fails_their_requests(server):
    stream = Stream(server)
    try:
        stream.send("async_stream", [grpc_input("PROMPT", text("long"), "BYTES"),
                                     grpc_input("CHUNKS", np.array([1000], np.int32),
                                                "INT32")], "long")  # 50 s of chunks
        first, error = stream.results.get(timeout=WAIT_S)
        assert error is None and first.as_numpy("TEXT")[0].startswith(b"chunk 1/1000")
        start = time.monotonic()
        server.http_client().unload_model("async_stream")
        client = server.http_client()
        while client.is_model_ready("async_stream"):
            time.sleep(0.02)
        # The stream ends with an error (no more chunks are coming).
        while True:
            _, error = stream.results.get(timeout=WAIT_S)
            if error is not None:
                break
        elapsed = time.monotonic() - start
    finally:
        stream.close()
        server.http_client().load_model("async_stream")
    assert elapsed < EXIT_TIMEOUT_S
    # The cancelled coroutine's request is closed by the stub ("cancelled"); had it
    # been missed, the parent fails it when the stub is gone ("unloaded").
    assert "cancelled" in error.message() or "unloaded" in error.message()
