"""The statistics extension filled as Triton fills it for Python models: queue counts
the successes, compute_input / compute_infer / compute_output the successes that
executed, fail has the failures' time, a model's own error response is a success (an
exception in execute a failure), memory_usage is empty; and, beyond Triton's Python
backend (which reports none), a decoupled model's `response_stats` per response index.
When the real tritonserver 2.51 is installed (/tmp/anchor-venv, /work/shared/perf), the
same requests to the same models on both servers give the same counts."""

from __future__ import annotations

import contextlib
import glob

import os
import queue
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import free_ports, running_server

IO = '''
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''
MODELS = {
    "plain": ("", '''
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
'''),
    "answers_error": ("", '''
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError("no, thanks"))
                for r in requests]
'''),
    "raises": ("", '''
class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("execute raised")
'''),
    "stream": ("model_transaction_policy { decoupled: true }", '''
class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender = request.get_response_sender()
            for _ in range(2):
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", x)]))
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("bad")))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''),
}
ANCHOR = Path(os.environ.get("ANCHOR_VENV", "/tmp/anchor-venv"))
TRITON_DIST = ANCHOR / "lib/python3.11/site-packages/pytriton/tritonserver"
ENV_ANCHOR = Path("/work/shared/perf/env_anchor.sh")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("stats") / "repo"
    for name, (extra, code) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(
            "import triton_python_backend_utils as pb_utils\n" + code)
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            + IO.format(extra=extra))
    return repo


def _drive(http_url: str, grpc_url: str) -> dict[str, dict]:
    """The same requests to either server: 3 plain, 2 answered with an error, 1 that
    raises, 2 streams; the statistics of every model, by name."""
    http = httpclient.InferenceServerClient(http_url)
    x = np.arange(4, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(x)
    for _ in range(3):
        http.infer("plain", [tensor])
    for model, times in (("answers_error", 2), ("raises", 1)):
        for _ in range(times):
            with pytest.raises(InferenceServerException):
                http.infer(model, [tensor])
    grpc = grpcclient.InferenceServerClient(grpc_url)
    got: queue.Queue = queue.Queue()
    grpc.start_stream(callback=lambda result, error: got.put((result, error)))
    stream_input = grpcclient.InferInput("INPUT0", [4], "FP32")
    stream_input.set_data_from_numpy(x)
    for _ in range(2):
        grpc.async_stream_infer("stream", [stream_input], enable_empty_final_response=True)
    finals = 0
    while finals < 2:
        result, error = got.get(timeout=30)
        if result is not None and result.get_response().parameters[
                "triton_final_response"].bool_param:
            finals += 1
    grpc.stop_stream()
    stats = http.get_inference_statistics()["model_stats"]
    by_name = {entry["name"]: entry for entry in stats}
    # the same over gRPC (ModelStatisticsResponse), as tritonclient reads it
    by_name["grpc:stream"] = grpc.get_inference_statistics("stream", as_json=True)
    return by_name


def _counts(entry: dict) -> dict:
    """What two servers must agree on: every count, and which durations are nonzero."""
    return {
        "inference_count": entry["inference_count"],
        "execution_count": entry["execution_count"],
        **{name: (f["count"], f["ns"] > 0) for name, f in entry["inference_stats"].items()},
        "batch_stats": [(b["batch_size"], b["compute_infer"]["count"])
                        for b in entry["batch_stats"]],
        "memory_usage": entry["memory_usage"],
    }


@pytest.fixture(scope="module")
def pbserve_stats(repo) -> dict[str, dict]:
    with running_server(repo) as server:
        return _drive(server.http_url, server.grpc_url)


def test_a_plain_model_fills_every_duration_and_counts_its_successes(pbserve_stats):
    entry = pbserve_stats["plain"]
    stats = entry["inference_stats"]
    for name in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert stats[name]["count"] == 3 and stats[name]["ns"] > 0, name
    assert stats["fail"] == {"count": 0, "ns": 0}
    assert entry["response_stats"] == {} and entry["memory_usage"] == []
    [batch] = entry["batch_stats"]
    assert batch["compute_input"]["ns"] > 0 and batch["compute_output"]["ns"] > 0


def test_a_models_error_response_is_a_success_and_an_exception_a_failure(pbserve_stats):
    answered = pbserve_stats["answers_error"]["inference_stats"]
    assert answered["success"]["count"] == 2 and answered["fail"]["count"] == 0
    raised = pbserve_stats["raises"]["inference_stats"]
    assert raised["fail"]["count"] == 1 and raised["fail"]["ns"] > 0
    assert raised["success"]["count"] == raised["queue"]["count"] == 0
    assert raised["compute_infer"] == {"count": 0, "ns": 0}


def test_a_decoupled_model_has_statistics_per_response_index(pbserve_stats):
    entry = pbserve_stats["stream"]
    assert entry["inference_stats"]["success"]["count"] == 2
    responses = entry["response_stats"]
    assert sorted(responses) == ["0", "1", "2", "3"]
    for index in ("0", "1"):
        assert responses[index]["success"]["count"] == 2
        assert responses[index]["compute_infer"]["count"] == 2
        assert responses[index]["compute_output"]["count"] == 2
        assert responses[index]["success"]["ns"] > 0
    assert responses["2"]["fail"]["count"] == 2 and responses["2"]["success"]["count"] == 0
    last = responses["3"]
    assert last["empty_response"]["count"] == 2 and last["compute_output"]["count"] == 0
    assert last["cancel"] == {"count": 0, "ns": 0}
    [over_grpc] = pbserve_stats["grpc:stream"]["model_stats"]
    assert sorted(over_grpc["response_stats"]) == ["0", "1", "2", "3"]
    assert over_grpc["response_stats"]["2"]["fail"]["count"] == "2"  # int64 as JSON


def _triton_regions() -> set[str]:
    """The shared memory the real Triton's Python backend names in /dev/shm."""
    return {n for n in os.listdir("/dev/shm") if n.startswith("triton_python_backend_")}


@pytest.mark.skipif(not (TRITON_DIST / "bin" / "tritonserver").exists()
                    or not ENV_ANCHOR.exists(),
                    reason="the real tritonserver 2.51 is not installed (setup_anchor.sh)")
def test_the_counts_are_the_real_triton_ones(repo, pbserve_stats, tmp_path):
    http, grpc, metrics = free_ports(3)
    log = open(tmp_path / "triton.log", "wb")
    command = (f'source {ENV_ANCHOR} && exec "$TRITON_BIN" '
               f'--backend-directory="$TRITON_BACKENDS" --model-repository={repo} '
               f"--http-port={http} --grpc-port={grpc} --metrics-port={metrics}")
    before = _triton_regions()
    envs_before = set(glob.glob("/tmp/python_env_*"))
    proc = subprocess.Popen(["bash", "-c", command], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "triton.log").read_text()[-2000:]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "tritonserver not ready"
                time.sleep(0.2)
        triton = _drive(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}")
    finally:
        # Only its counts are wanted: SIGKILL to its process group (tritonserver and its
        # stubs) spares its unload, which polls once a second (2-4 s); what it leaves is
        # removed below.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        log.close()
        for name in _triton_regions() - before:  # what its stubs left in /dev/shm
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")
        # ... and the empty /tmp/python_env_XXXXXX its Python backend makes and leaves
        for path in set(glob.glob("/tmp/python_env_*")) - envs_before:
            with contextlib.suppress(OSError):  # only an empty one: rmdir
                os.rmdir(path)
    for name in MODELS:
        assert _counts(pbserve_stats[name]) == _counts(triton[name]), name
        # Triton's Python backend reports no response statistics; pbserve does.
        assert triton[name]["response_stats"] == {}


UNTIL_CANCELLED = '''
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender = request.get_response_sender()
            for _ in range(500):
                if request.is_cancelled():
                    break
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", x)]))
                time.sleep(0.01)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


def test_responses_after_a_cancellation_count_as_cancelled(tmp_path):
    repo = tmp_path / "repo"
    (repo / "until_cancelled" / "1").mkdir(parents=True)
    (repo / "until_cancelled" / "1" / "model.py").write_text(UNTIL_CANCELLED)
    (repo / "until_cancelled" / "config.pbtxt").write_text(
        'name: "until_cancelled"\nbackend: "python"\nmax_batch_size: 0\n'
        + IO.format(extra="model_transaction_policy { decoupled: true }"))
    with running_server(repo) as server:
        grpc = server.grpc_client()
        got: queue.Queue = queue.Queue()
        grpc.start_stream(callback=lambda result, error: got.put((result, error)))
        tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.zeros(4, dtype=np.float32))
        grpc.async_stream_infer("until_cancelled", [tensor])
        for _ in range(3):
            got.get(timeout=30)
        grpc.stop_stream(cancel_requests=True)
        deadline = time.monotonic() + 30
        while True:
            [entry] = server.http_client().get_inference_statistics(
                "until_cancelled")["model_stats"]
            cancelled = sum(r["cancel"]["count"] for r in entry["response_stats"].values())
            if cancelled or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        responses = entry["response_stats"]
        assert cancelled >= 1  # at least the final one, sent after the cancellation
        assert all(responses[str(i)]["success"]["count"] == 1 for i in range(3))
        assert entry["inference_stats"]["fail"]["count"] == 1  # a cancelled request
