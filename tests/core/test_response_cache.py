"""The response cache (`response_cache { enable: true }`, --cache-config local,size=N,
--response-cache-byte-size): a repeated request is answered from the cache without
reaching the model, least recently used out first; Triton's statistics and metrics;
decoupled and sequence-batched models refused with Triton's words."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pbserve.testing import free_ports, running_server

# OUTPUT0 = INPUT0; RUNS = how many requests the model has executed (a cached response
# carries the count of the run that made it).
COUNTING_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.runs += 1
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", x),
                pb_utils.Tensor("RUNS", np.array([self.runs], dtype=np.int64))]))
        return responses
'''
CONFIG = '''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "RUNS" data_type: TYPE_INT64 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''
CACHE_ON = "response_cache { enable: true }"


def _model(repo: Path, name: str, extra: str = CACHE_ON) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(COUNTING_MODEL)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    _model(repo, "cached")
    _model(repo, "uncached", extra="")
    return repo


def _http_infer(client, model: str, x: np.ndarray) -> tuple[np.ndarray, int]:
    tensor = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer(model, [tensor])
    return result.as_numpy("OUTPUT0"), int(result.as_numpy("RUNS")[0])


def _grpc_infer(client, model: str, x: np.ndarray) -> tuple[np.ndarray, int]:
    tensor = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer(model, [tensor])
    return result.as_numpy("OUTPUT0"), int(result.as_numpy("RUNS")[0])


def _stats(server, model: str) -> dict:
    return server.http_client().get_inference_statistics(model)["model_stats"][0]


def _metrics(server) -> dict[str, float]:
    text = urllib.request.urlopen(server.metrics_url).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_a_repeated_request_is_answered_from_the_cache_without_running_the_model(repo):
    with running_server(repo, args=["--cache-config", "local,size=1048576"]) as server:
        http, grpc = server.http_client(), server.grpc_client()
        a = np.arange(256, dtype=np.float32)
        b = a + 1
        out, runs = _http_infer(http, "cached", a)
        assert runs == 1 and np.array_equal(out, a)
        for infer, client in ((_http_infer, http), (_grpc_infer, grpc), (_http_infer, http)):
            out, runs = infer(client, "cached", a)
            assert runs == 1 and np.array_equal(out, a)  # the model did not run again
        out, runs = _grpc_infer(grpc, "cached", b)  # other inputs: a miss
        assert runs == 2 and np.array_equal(out, b)
        assert _http_infer(http, "cached", a.reshape(16, 16).ravel())[1] == 1
        # a model that does not enable the cache runs every time
        assert [_http_infer(http, "uncached", a)[1] for _ in range(3)] == [1, 2, 3]

        stats = _stats(server, "cached")
        infer_stats = stats["inference_stats"]
        assert infer_stats["cache_hit"]["count"] == 4 and infer_stats["cache_hit"]["ns"] > 0
        assert infer_stats["cache_miss"]["count"] == 2 and infer_stats["cache_miss"]["ns"] > 0
        assert infer_stats["success"]["count"] == 6
        assert infer_stats["queue"]["count"] == 6  # as Triton: every success
        for figure in ("compute_input", "compute_infer", "compute_output"):
            assert infer_stats[figure]["count"] == 2  # only the requests that executed
        assert (stats["inference_count"], stats["execution_count"]) == (2, 2)
        assert _stats(server, "uncached")["inference_stats"]["cache_hit"]["count"] == 0

        metrics = _metrics(server)
        labels = '{model="cached",version="1"}'
        assert metrics[f"nv_cache_num_hits_per_model{labels}"] == 4
        assert metrics[f"nv_cache_num_misses_per_model{labels}"] == 2
        assert f"nv_cache_hit_duration_per_model{labels}" in metrics
        assert f"nv_cache_miss_duration_per_model{labels}" in metrics
        assert 'nv_cache_num_hits_per_model{model="uncached",version="1"}' not in metrics
        assert metrics[f"nv_inference_count{labels}"] == 2
        assert metrics[f"nv_inference_request_success{labels}"] == 6
        assert metrics["nv_cache_num_entries"] == 2
        assert metrics["nv_cache_num_lookups"] == 6
        assert metrics["nv_cache_num_hits"] == 4 and metrics["nv_cache_num_misses"] == 2
        assert 0 < metrics["nv_cache_util"] < 1


def test_the_least_recently_used_response_is_evicted_when_the_cache_is_full(repo):
    # Each response is 4 KiB of OUTPUT0 (+ RUNS and its record): two fit, not three.
    with running_server(repo, args=["--cache-config", "local,size=10000"]) as server:
        http = server.http_client()
        a, b, c = (np.full(1024, v, dtype=np.float32) for v in (1, 2, 3))
        assert _http_infer(http, "cached", a)[1] == 1
        assert _http_infer(http, "cached", b)[1] == 2
        assert _http_infer(http, "cached", a)[1] == 1  # hit: a is now the most recent
        assert _http_infer(http, "cached", c)[1] == 3  # evicts b
        assert _http_infer(http, "cached", a)[1] == 1
        assert _http_infer(http, "cached", b)[1] == 4  # b was evicted: it runs again
        metrics = _metrics(server)
        assert metrics["nv_cache_num_evictions"] == 2  # b, then c (least recent) for b
        assert metrics["nv_cache_num_entries"] == 2
        # A response larger than the whole cache is answered, never kept.
        big = np.zeros(4096, dtype=np.float32)
        assert [_http_infer(http, "cached", big)[1] for _ in range(2)] == [5, 6]


def test_without_a_server_cache_the_models_setting_changes_nothing(repo):
    with running_server(repo) as server:
        http = server.http_client()
        a = np.ones(8, dtype=np.float32)
        assert [_http_infer(http, "cached", a)[1] for _ in range(2)] == [1, 2]
        stats = _stats(server, "cached")["inference_stats"]
        assert stats["cache_hit"]["count"] == stats["cache_miss"]["count"] == 0
        assert "nv_cache_num_entries" not in _metrics(server)


def test_the_older_response_cache_byte_size_flag_makes_a_local_cache(repo, tmp_path):
    log = tmp_path / "server.log"
    with running_server(repo, args=["--response-cache-byte-size", "65536"],
                        log_path=log) as server:
        http = server.http_client()
        a = np.ones(8, dtype=np.float32)
        assert [_http_infer(http, "cached", a)[1] for _ in range(3)] == [1, 1, 1]
        assert "'--response-cache-byte-size' has been deprecated!" in server.log_text()
        assert "--cache-config=local,size=65536" in server.log_text()


def test_decoupled_and_sequence_batched_models_cannot_enable_the_cache(tmp_path):
    repo = tmp_path / "repo"
    _model(repo, "dec", extra=CACHE_ON + "\nmodel_transaction_policy { decoupled: true }")
    _model(repo, "seq", extra=CACHE_ON + "\nsequence_batching { }")
    _model(repo, "fine")
    with running_server(repo, args=["--cache-config", "local,size=4096"],
                        ready_path="/v2/health/live") as server:
        index = {m["name"]: m for m in server.http_client().get_model_repository_index()}
        assert index["fine"]["state"] == "READY"
        assert index["dec"]["reason"].endswith(
            "Response Cache does not currently support model dec with 'decoupled' "
            "transaction policy. Please disable the response cache.")
        assert index["seq"]["reason"].endswith(
            "Response Cache does not currently support model seq with sequence batching "
            "scheduler. Please disable the response cache.")


@pytest.mark.parametrize("args, message", [
    (["--cache-config", "local"], "No cache specified. --cache-config option format is "
     "<cache name>,<setting>=<value>. Got local"),
    (["--cache-config", "local,size=abc"], "--cache-config local,size=abc: expected a "
     "whole number of bytes"),
    (["--cache-config", "local,size=0"], "the cache size must be at least 1 byte"),
    (["--cache-config", "memcached,host=x"], "unsupported cache 'memcached'"),
    (["--cache-config", "local,sise=10"], "unknown setting 'sise'"),
    (["--response-cache-byte-size", "10", "--cache-config", "local,size=10"],
     "Incompatible flags --response-cache-byte-size and --cache-config both provided. "
     "Please provide one or the other."),
])
def test_a_bad_cache_flag_is_an_error_naming_it(repo, args, message):
    http, grpc, metrics = free_ports(3)
    done = subprocess.run(
        [sys.executable, "-m", "pbserve", "--model-repository", str(repo),
         "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
         *args], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert message in done.stderr


def test_statistics_json_of_a_hit_counts_as_triton(repo):
    """The statistics extension over HTTP, raw: hits are successes with no execution."""
    with running_server(repo, args=["--cache-config", "local,size=65536"]) as server:
        http = server.http_client()
        a = np.ones(4, dtype=np.float32)
        for _ in range(3):
            _http_infer(http, "cached", a)
        url = f"http://{server.http_url}/v2/models/cached/stats"
        [stats] = json.load(urllib.request.urlopen(url))["model_stats"]
        assert stats["inference_stats"]["cache_hit"]["count"] == 2
        assert stats["batch_stats"][0]["compute_infer"]["count"] == 1


ENSEMBLE = '''
name: "ens"
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "RUNS" data_type: TYPE_INT64 dims: [ 1 ] } ]
ensemble_scheduling { step [ {
  model_name: "uncached" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" }
  output_map [ { key: "OUTPUT0" value: "OUTPUT0" }, { key: "RUNS" value: "RUNS" } ]
} ] }
response_cache { enable: true }
'''


def test_an_ensemble_caches_its_responses_at_its_top_level(repo):
    (repo / "ens" / "1").mkdir(parents=True)
    (repo / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    with running_server(repo, args=["--cache-config", "local,size=65536"]) as server:
        http = server.http_client()
        a = np.arange(8, dtype=np.float32)
        results = [_http_infer(http, "ens", a) for _ in range(3)]
        assert [runs for _, runs in results] == [1, 1, 1]
        assert all(np.array_equal(out, a) for out, _ in results)
        assert _http_infer(http, "ens", a + 1)[1] == 2
        stats = _stats(server, "ens")["inference_stats"]
        assert (stats["cache_hit"]["count"], stats["cache_miss"]["count"]) == (2, 2)
        assert _stats(server, "uncached")["inference_stats"]["success"]["count"] == 2
        # As Triton 2.51: the ensemble's own per-model cache metrics (not its step's)
        metrics = _metrics(server)
        labels = '{model="ens",version="1"}'
        assert metrics[f"nv_cache_num_hits_per_model{labels}"] == 2
        assert metrics[f"nv_cache_num_misses_per_model{labels}"] == 2
        assert f"nv_cache_hit_duration_per_model{labels}" in metrics
        assert f"nv_cache_miss_duration_per_model{labels}" in metrics
        assert 'nv_cache_num_hits_per_model{model="uncached",version="1"}' not in metrics
        assert metrics[f"nv_inference_request_success{labels}"] == 4


def test_a_reloaded_model_does_not_answer_with_what_its_previous_load_made(repo):
    args = ["--cache-config", "local,size=65536", "--model-control-mode", "explicit",
            "--load-model", "cached"]
    with running_server(repo, args=args) as server:
        http = server.http_client()
        a = np.ones(4, dtype=np.float32)
        assert [_http_infer(http, "cached", a)[1] for _ in range(2)] == [1, 1]
        model_py = repo / "cached" / "1" / "model.py"
        model_py.write_text(model_py.read_text().replace("self.runs = 0", "self.runs = 100"))
        http.load_model("cached")
        assert [_http_infer(http, "cached", a)[1] for _ in range(2)] == [101, 101]
