"""--rate-limit execution_count with rate_limiter config, against a real server: an
instance starts only when its resources are free, staged instances go in priority
order, and Triton's flag and load errors (words taken from tritonserver 2.51). The
priority test's models give the same order on tritonserver 2.51 (blocker, p1, p2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from pbserve.core.scheduling.rate_limiter import PER_DEVICE, RateLimiter, parse_resource
from pbserve.errors import ServerError
from pbserve.testing import running_server

MODEL = """
import os, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        self.trace = os.environ["TRACE"]

    def _mark(self, what):
        with open(self.trace, "a") as f:
            f.write(f"{what} {self.name}\\n")

    def execute(self, requests):
        self._mark("start")
        gate = os.environ.get("GATE", "")
        if self.name.startswith("blocker"):
            while not os.path.exists(gate):
                time.sleep(0.01)
        else:
            time.sleep(0.05)
        self._mark("end")
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests]
"""


def _model(repo: Path, name: str, count: int, limiter: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(f"""
        name: "{name}"
        backend: "python"
        max_batch_size: 0
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        instance_group [ {{ count: {count} kind: KIND_CPU {limiter} }} ]
        """))
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(MODEL))


def _infer(url: str, model: str) -> None:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    try:
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.ones(1, np.float32))
        client.infer(model, [tensor])
    finally:
        client.close()  # here, not in __del__ on whichever thread collects it


def _concurrently(url: str, models: list[str]) -> None:
    threads = [threading.Thread(target=_infer, args=(url, m)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)


def _most_at_once(trace: Path) -> int:
    running = most = 0
    for line in trace.read_text().splitlines():
        running += 1 if line.startswith("start") else -1
        most = max(most, running)
    return most


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    trace, gate = tmp_path / "trace", tmp_path / "gate"
    monkeypatch.setenv("TRACE", str(trace))
    monkeypatch.setenv("GATE", str(gate))
    return trace, gate


def test_instances_sharing_a_resource_run_one_at_a_time(tmp_path: Path, env) -> None:
    trace, _ = env
    repo = tmp_path / "repo"
    resource = 'rate_limiter { resources [ { name: "R" count: 1 } ] }'
    _model(repo, "a", 2, resource)
    _model(repo, "b", 2, resource)
    _model(repo, "free", 2, "")  # no rate_limiter config: never held
    with running_server(repo, args=["--rate-limit", "execution_count"]) as server:
        _concurrently(server.http_url, ["a", "b"] * 4)
        assert _most_at_once(trace) == 1
        trace.unlink()
        # two copies of R on the command line: two run at once at most
    with running_server(repo, args=["--rate-limit=execution_count",
                                    "--rate-limit-resource=R:2"]) as server:
        _concurrently(server.http_url, ["a", "b"] * 4)
        assert _most_at_once(trace) <= 2
        trace.unlink()
        # a model without rate_limiter config is not held by the others
        _concurrently(server.http_url, ["free"] * 4)
    assert len(trace.read_text().splitlines()) == 8


def test_staged_instances_start_in_priority_order(tmp_path: Path, env) -> None:
    trace, gate = env
    repo = tmp_path / "repo"
    _model(repo, "blocker", 1, 'rate_limiter { resources [ { name: "R" count: 1 global: true'
                               ' } ] }')
    for name, priority in (("p1", 1), ("p2", 2)):
        _model(repo, name, 1, 'rate_limiter { resources [ { name: "R" count: 1 global: true'
                              f' }} ] priority: {priority} }}')
    with running_server(repo, args=["--rate-limit", "execution_count"],
                        log_path=tmp_path / "log") as server:
        url = server.http_url
        for name in ("p1", "p2"):  # one execution each: scaled priorities 1 and 2
            _infer(url, name)
        trace.unlink()
        holder = threading.Thread(target=_infer, args=(url, "blocker"))
        holder.start()
        _wait(lambda: trace.exists() and "start blocker_0_0" in trace.read_text())
        # p2 is staged first, then p1; p1 goes first once R is free (1 x 1 < 1 x 2)
        second = threading.Thread(target=_infer, args=(url, "p2"))
        second.start()
        time.sleep(0.3)  # (only lets p2 be staged first; nothing is timed)
        first = threading.Thread(target=_infer, args=(url, "p1"))
        first.start()
        time.sleep(0.3)
        assert trace.read_text().splitlines() == ["start blocker_0_0"]  # both wait for R
        gate.touch()
        for thread in (holder, first, second):
            thread.join(120)
    assert [line for line in trace.read_text().splitlines() if line.startswith("start")] \
        == ["start blocker_0_0", "start p1_0_0", "start p2_0_0"]


def _wait(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_resource_given_fewer_copies_than_an_instance_needs_fails_its_load(
        tmp_path: Path, env) -> None:
    repo = tmp_path / "repo"
    _model(repo, "big", 1, 'rate_limiter { resources [ { name: "R" count: 2 } ] }')
    _model(repo, "small", 1, "")
    with running_server(repo, args=["--rate-limit", "execution_count",
                                    "--rate-limit-resource", "R:1"],
                        ready_path="/v2/health/live") as server:
        client = server.http_client()
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["big"]["state"] == "UNAVAILABLE"
        assert ('Resource count for "R" is limited to 1 which will prevent scheduling of one '
                "or more model instances, the minimum required count is 2"
                ) in index["big"]["reason"]
        assert index["small"]["state"] == "READY"
        client.close()
    # rate limiting off: the rate_limiter config is ignored, as in Triton
    with running_server(repo, args=["--rate-limit-resource", "R:1"]) as server:
        client = server.http_client()
        assert client.is_model_ready("big")
        client.close()


@pytest.mark.parametrize("args, words", [
    (["--rate-limit", "sometimes"], "invalid argument for --rate-limit"),
    (["--rate-limit-resource", "R"], "--rate-limit-resource option format is "
     "'<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got R"),
])
def test_tritons_flag_errors(tmp_path: Path, args: list[str], words: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pbserve", "--model-repository",
                           str(tmp_path), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and words in done.stderr


def test_limiter_resources_and_validation() -> None:
    assert parse_resource("R2:5:0") == ("R2", 5, 0)
    assert parse_resource("R1:10") == ("R1", 10, PER_DEVICE)
    for bad in ("R", "R:x", "R:1:2:3", ":1"):
        with pytest.raises(ValueError):
            parse_resource(bad)
    # Triton's example: R1 per device, R2 per device 0 / 1, R3 global
    limiter = RateLimiter([parse_resource(r) for r in ("R1:10", "R2:5:0", "R2:8:1", "R3:2")])
    limiter.add("g0", [("R1", 10, False), ("R2", 5, False), ("R3", 2, True)], 0, 1)
    limiter.add("g1", [("R2", 8, False)], 1, 1)
    with pytest.raises(ServerError, match='limited to 5 .* minimum required count is 6'):
        limiter.add("g0b", [("R2", 6, False)], 0, 1)
    with pytest.raises(ServerError, match='Resource "R3" is present as both global and '
                       "device-specific resource in the model configuration."):
        limiter.add("bad", [("R3", 1, False)], 0, 1)
    # defaults: the most any instance asks for, per device
    limiter = RateLimiter()
    one = limiter.add("one", [("R", 1, False)], 0, 1)
    two = limiter.add("two", [("R", 2, False)], 0, 1)
    other_gpu = limiter.add("gpu1", [("R", 2, False)], 1, 1)
    started: list[str] = []
    two.stage(lambda: started.append("two"))
    one.stage(lambda: started.append("one"))  # 2 + 1 > 2: waits
    other_gpu.stage(lambda: started.append("gpu1"))  # behind "one": head of line
    assert started == ["two"]
    two.release()
    assert started == ["two", "one", "gpu1"]
