"""Models that run unmodified on Triton's Python backend, through a real server: what model
code sees of its process (sys.argv), BLS outside `execute`, model files importing each
other, BLS streams and their cancellation, bytes for strings, the error texts clients
match on, and readiness (the stubs' health, the model's own `is_ready()`).

The models live in tests/models_compat (some must fail to load: the server runs in
explicit mode and each test loads what it needs).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from client_inputs import grpc_input, http_input
from pbserve.testing import running_server
from polling import wait_for

COMPAT = Path(__file__).resolve().parents[1] / "models_compat"
STARTUP = ["argv_probe", "rendezvous", "rendezvous_caller", "stubborn_stream",
           "stream_canceller", "bls_by_name", "decoupled_returns", "response_params",
           "readiness_probe"]
BLS_OUTSIDE_EXECUTE = "BLS is only supported during the 'execute' function."
DUMMY = [http_input("DUMMY", np.array([0], np.int32))]
WAIT_S = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("compat") / "server.log"
    args = ["--model-control-mode", "explicit", "--log-verbose", "1"]
    for name in STARTUP:
        args += ["--load-model", name]
    with running_server(COMPAT, args=args, log_path=log, ready_timeout=60) as srv:
        yield srv


def report(result, name: str = "REPORT") -> dict:
    return json.loads(result.as_numpy(name)[0])


def source_line(model: Path, needle: str) -> int:
    lines = model.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def log_lines(server, needle: str) -> list[str]:
    return [line for line in server.log_text().splitlines() if needle in line]


# -- 1. command-line arguments --------------------------------------------------------
def test_model_code_sees_no_command_line_arguments(server):
    found = report(server.http_client().infer("argv_probe", DUMMY))
    assert found["argv"] == [""] and found["argv_at_initialize"] == [""]
    assert found["parsed"] == {}  # argparse in the model neither failed nor exited
    assert (found["tests_run"], found["tests_failed"]) == (1, 0)  # unittest.main too


# -- 2. BLS outside execute -----------------------------------------------------------
def test_bls_in_initialize_fails_the_load_with_tritons_error(server):
    client = server.http_client()
    with pytest.raises(InferenceServerException) as err:
        client.load_model("bls_in_initialize")
    assert err.value.message().startswith(
        "load failed for model 'bls_in_initialize': version 1 is at UNAVAILABLE state: "
        f"Internal: TritonModelException: {BLS_OUTSIDE_EXECUTE}")
    assert not client.is_model_ready("bls_in_initialize")


def test_bls_in_finalize_raises_and_is_logged_after_bls_in_execute_worked(server):
    client = server.http_client()
    client.load_model("bls_in_finalize")
    assert report(client.infer("bls_in_finalize", DUMMY))["argv"] == [""]
    client.unload_model("bls_in_finalize")
    wait_for(lambda: any("finalize" in line and BLS_OUTSIDE_EXECUTE in line
                         for line in server.log_text().splitlines()),
             "the finalize error in the server log")


# -- 3. model files importing each other ----------------------------------------------
def test_model_files_import_each_other_as_in_triton(server):
    client = server.http_client()
    client.load_model("split_files")
    try:
        found = report(client.infer("split_files", DUMMY))
    finally:
        client.unload_model("split_files")
    version_dir, model_dir = COMPAT / "split_files" / "1", COMPAT / "split_files"
    assert (found["name"], found["package"]) == ("1.model", "1")
    assert found["relative"] == 42 and found["from_relative"] == 2  # from . import / from .x
    assert found["top_level"] == 10 and found["model_folder"] == "model"  # plain import
    assert Path(found["version_package"]) == version_dir
    # appended, version folder first: installed packages are not shadowed by model files
    assert [Path(p) for p in found["sys_path_tail"]] == [version_dir, model_dir]


def stream_results(server, model: str, requests: list[dict[str, np.ndarray]]) -> list:
    """Send every request on one gRPC stream; each request's responses (until its final
    flag), in the order the requests were sent."""
    client = server.grpc_client()
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i, inputs in enumerate(requests):
            client.async_stream_infer(model, [grpc_input(k, v) for k, v in inputs.items()],
                                      request_id=str(i), enable_empty_final_response=True)
        got: dict[str, list] = {str(i): [] for i in range(len(requests))}
        done = 0
        while done < len(requests):
            result, error = results.get(timeout=WAIT_S)
            assert error is None, error
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            if result.as_numpy("SEEN") is not None:
                got[response.id].append(result)
            done += final
        return [got[str(i)] for i in range(len(requests))]
    finally:
        client.stop_stream()
        client.close()


def stream_error(server, model: str, inputs: dict[str, np.ndarray]) -> str:
    """The error message a request that fails on a gRPC stream gets."""
    client = server.grpc_client()
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(model, [grpc_input(k, v) for k, v in inputs.items()])
        result, error = results.get(timeout=WAIT_S)
        assert result is None, "expected an error"
        return error.message()
    finally:
        client.stop_stream()
        client.close()


# -- 4. await async_exec(decoupled=True) ----------------------------------------------
def rendezvous(calls: int, parties: int, group: str) -> dict[str, np.ndarray]:
    return {"CALLS": np.array([calls], np.int32), "PARTIES": np.array([parties], np.int32),
            "GROUP": np.array([group.encode()], np.object_)}


def test_requests_iterating_bls_streams_with_a_plain_for_all_have_their_calls_running(server):
    """Three requests, each an `execute` coroutine that reads its BLS stream with a
    blocking `for`: the await resolves on the first response, so the others start their
    calls meanwhile and the callee sees all three together."""
    answers = stream_results(server, "rendezvous_caller",
                             [rendezvous(1, 3, "requests")] * 3)
    assert [[list(r.as_numpy("SEEN")) for r in a] for a in answers] == [[[3]]] * 3


def test_gathered_coroutines_iterating_bls_streams_all_have_their_calls_running(server):
    [answer] = stream_results(server, "rendezvous_caller", [rendezvous(3, 3, "gathered")])
    assert [list(r.as_numpy("SEEN")) for r in answer] == [[3, 3, 3]]


# -- 5. ResponseIterator.cancel() -----------------------------------------------------
def test_cancelling_a_bls_stream_asks_the_callee_and_reads_on_to_its_final_flag(server):
    got = report(server.http_client().infer(
        "stream_canceller", [http_input("COUNT", np.array([4], np.int32))]))
    # every response came, no CANCELLED error; the callee saw the cancellation
    assert got == [[0, False], [1, True], [2, True], [3, True], "final"]


# -- 8. bytes for strings, a BLS call to a model that does not exist, tracebacks -------
BY_NAME = COMPAT / "bls_by_name" / "1" / "model.py"


def by_name(name: bytes) -> list:
    return [http_input("MODEL_NAME", np.array([name], np.object_))]


def test_string_arguments_of_the_api_take_bytes(server):
    result = server.http_client().infer("bls_by_name", by_name(b"argv_probe"))
    assert report(result)["argv"] == [""]  # model_name, Tensor name, output names: bytes


def test_bls_to_a_model_that_does_not_exist_fails_with_tritons_text_and_traceback(server):
    with pytest.raises(InferenceServerException) as err:
        server.http_client().infer("bls_by_name", by_name(b"undefined_model"))
    assert err.value.message() == (
        "Failed to process the request(s) for model 'bls_by_name_0_0', message: "
        "TritonModelException: Model undefined_model - Error when running inference: "
        "Failed for execute the inference request. Model 'undefined_model' is not ready."
        "\n\nAt:\n"  # the frames of model code, innermost first
        f"  {BY_NAME}({source_line(BY_NAME, 'raise pb_utils')}): forward\n"
        f"  {BY_NAME}({source_line(BY_NAME, 'self.forward(')}): execute\n")


# -- 9. error texts clients match on --------------------------------------------------
def test_decoupled_execute_returning_responses_fails_with_tritons_text(server):
    error = stream_error(server, "decoupled_returns", {"DUMMY": np.array([0], np.int32)})
    assert error == (
        "Failed to process the request(s) for model 'decoupled_returns_0_0', message: "
        "Python model 'decoupled_returns_0_0' is using the decoupled mode and the execute "
        "function must return None.")


def test_bls_without_decoupled_true_to_a_decoupled_model_fails_with_tritons_text(server):
    with pytest.raises(InferenceServerException) as err:
        server.http_client().infer("bls_by_name", by_name(b"rendezvous"))
    assert ("TritonModelException: Model rendezvous - Error when running inference: Model "
            "rendezvous is using the decoupled. The current BLS request call doesn't support "
            "models using the decoupled transaction policy. Please use 'decoupled=True' "
            "argument to the 'exec' or 'async_exec' calls for decoupled models.'") \
        in err.value.message()


def test_logger_lines_name_the_model_file_and_quote_the_message(server):
    server.http_client().infer("bls_by_name", by_name(b"argv_probe"))
    where = f"model.py:{source_line(BY_NAME, 'log_info(')}] "  # the file's name, no folder
    wait_for(lambda: log_lines(server, where + '"calling \\"argv_probe\\""'),
             "the Logger line, escaped and quoted, in the server log")


@pytest.mark.parametrize("params, message", [
    ([], ", got <class 'list'>"),
    ({"7": "int key"}, "Expect parameters keys to have type str, found type <class 'int'>"),
    ({"f": 0.5}, "Expect parameters values to have type bool/int/str, found type "
                 "<class 'float'>"),
    ({"n": None}, "Expect parameters values to have type bool/int/str, found type "
                  "<class 'NoneType'>"),
], ids=["list", "int-key", "float", "none"])
def test_response_parameters_of_the_wrong_type_fail_with_tritons_text(server, params, message):
    params_input = [http_input("PARAMS", np.array([json.dumps(params).encode()], np.object_))]
    with pytest.raises(InferenceServerException) as err:
        server.http_client().infer("response_params", params_input)
    assert err.value.status() == "400" and message in err.value.message()


def test_response_parameters_of_the_right_types_reach_the_client(server):
    params = {"b": True, "i": 7, "s": "text"}
    result = server.grpc_client().infer(
        "response_params", [grpc_input("PARAMS", np.array([json.dumps(params).encode()],
                                                          np.object_))])
    got = result.get_response().parameters
    assert (got["b"].bool_param, got["i"].int64_param, got["s"].string_param) == \
        (True, 7, "text")


# -- 6. readiness follows the stub ----------------------------------------------------
def test_a_stub_that_dies_in_initialize_fails_the_load_as_not_healthy(server):
    client = server.http_client()
    with pytest.raises(InferenceServerException) as err:
        client.load_model("dies_in_initialize")
    assert "Stub process 'dies_in_initialize_0_0' is not healthy." in err.value.message()
    assert not client.is_model_ready("dies_in_initialize")


def test_model_is_not_ready_while_its_stub_is_dead_and_ready_once_it_is_back(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(COMPAT / "fragile", repo / "fragile")
    broken = repo / "fragile" / "broken"
    with running_server(repo, args=["--log-verbose", "1"],
                        log_path=tmp_path / "server.log") as srv:
        http, grpc = srv.http_client(), srv.grpc_client()
        pid = int(http.infer("fragile", DUMMY).as_numpy("PID")[0])
        assert http.is_model_ready("fragile") and grpc.is_model_ready("fragile")
        broken.touch()  # the restart fails until it is gone
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: log_lines(srv, "restart of 'fragile_0_0' failed"),
                 "a failed restart")
        assert not http.is_model_ready("fragile") and not grpc.is_model_ready("fragile")
        assert not http.is_server_ready()  # strict readiness: every model's stubs up
        assert len(log_lines(srv, "Model 'fragile' version 1 is not ready: Stub process "
                                  "'fragile_0_0' is not healthy.")) >= 2
        broken.unlink()
        wait_for(lambda: http.is_model_ready("fragile"), "the model ready again")
        assert grpc.is_model_ready("fragile") and http.is_server_ready()
        assert int(http.infer("fragile", DUMMY).as_numpy("PID")[0]) != pid


# -- 7. the model's own is_ready() ----------------------------------------------------
def probe(server, mode: bytes) -> int:
    """Set readiness_probe's mode; how many times its is_ready() ran so far."""
    result = server.http_client().infer(
        "readiness_probe", [http_input("MODE", np.array([mode], np.object_))])
    return int(result.as_numpy("CALLS")[0])


def test_model_readiness_asks_the_models_own_is_ready(server):
    http, grpc = server.http_client(), server.grpc_client()
    try:
        before = probe(server, b"ready")
        assert http.is_model_ready("readiness_probe") and grpc.is_model_ready("readiness_probe")
        assert probe(server, b"not_ready") == before + 2  # once per check
        assert not http.is_model_ready("readiness_probe")
        assert not grpc.is_model_ready("readiness_probe")
        assert log_lines(server, "Model 'readiness_probe' version 1 is not ready: Model "
                                 "'readiness_probe_0_0' is not ready (user-defined check "
                                 "failed).")
        probe(server, b"raise")
        assert not http.is_model_ready("readiness_probe")
        assert log_lines(server, "is not ready: RuntimeError: readiness_probe: failing on "
                                 "purpose")
    finally:
        probe(server, b"ready")
    assert http.is_model_ready("readiness_probe")


def test_concurrent_readiness_checks_share_one_bounded_call(server):
    before = probe(server, b"slow")
    answers: list[bool] = []
    checks = [threading.Thread(target=lambda: answers.append(
        server.http_client().is_model_ready("readiness_probe"))) for _ in range(3)]
    for check in checks:
        check.start()
    for check in checks:
        check.join(WAIT_S)
    assert answers == [False] * 3  # each gave up after 5 s
    assert probe(server, b"ready") == before + 1  # one call for the three
    wait_for(lambda: server.http_client().is_model_ready("readiness_probe"),
             "ready once the slow call has ended")


def test_is_ready_answering_no_bool_means_not_ready(server):
    client = server.http_client()
    client.load_model("ready_sync")
    try:
        assert not client.is_model_ready("ready_sync")
        assert log_lines(server, "Model 'ready_sync' version 1 is not ready: is_ready() must "
                                 "return a boolean value")
    finally:
        client.unload_model("ready_sync")
