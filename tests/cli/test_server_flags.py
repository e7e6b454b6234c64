"""tritonserver's flags, implemented: --strict-readiness, --exit-on-error,
--disable-auto-complete-config / --strict-model-config, --model-load-thread-count; and
the flags pbserve accepts and ignores, each named in a warning."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pbserve.cli.ignored_flags import IGNORED
from pbserve.testing import free_ports, running_server

MODELS = Path(__file__).parents[1] / "models_ext"
BAD_INIT = Path(__file__).parents[1] / "models" / "bad_init"


def _repo(tmp_path: Path, *names: str) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    for name in names:
        shutil.copytree(MODELS / name, repo / name)
    return repo


def _with_bad_model(tmp_path: Path) -> Path:
    repo = _repo(tmp_path, "log_probe")
    shutil.copytree(BAD_INIT, repo / "bad_init")
    return repo


def _run_to_exit(repo: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    http, grpc, metrics = free_ports(3)
    return subprocess.run(
        [sys.executable, "-m", "pbserve", "--model-repository", str(repo),
         "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
         *args], capture_output=True, text=True, timeout=timeout)


def test_exit_on_error_exits_when_a_model_fails_at_start_up(tmp_path):
    done = _run_to_exit(_with_bad_model(tmp_path))
    assert done.returncode == 1
    assert "failed to load all models (bad_init)" in done.stderr


def test_exit_on_error_false_serves_the_other_models(tmp_path):
    args = ["--exit-on-error", "false"]
    with running_server(_with_bad_model(tmp_path), args=args,
                        ready_path="/v2/health/live") as server:
        client = server.http_client()
        assert client.is_model_ready("log_probe")
        assert not client.is_model_ready("bad_init")
        assert not client.is_server_ready()  # strict readiness: a model failed


def test_strict_readiness_false_is_ready_when_live(tmp_path):
    args = ["--exit-on-error", "false", "--strict-readiness", "false"]
    with running_server(_with_bad_model(tmp_path), args=args) as server:
        client = server.http_client()
        assert client.is_server_ready()
        assert not client.is_model_ready("bad_init")
        assert server.grpc_client().is_server_ready()


@pytest.mark.parametrize("flags, completed", [
    ([], True),
    (["--disable-auto-complete-config"], False),
    (["--strict-model-config", "true"], False),
    (["--strict-model-config", "false"], True),
])
def test_auto_complete_flags(tmp_path, flags, completed):
    with running_server(_repo(tmp_path, "auto_fill"), args=flags) as server:
        config = server.http_client().get_model_config("auto_fill")
    names = [t["name"] for t in config.get("input", [])] + \
            [t["name"] for t in config.get("output", [])]
    assert names == (["X", "Y"] if completed else [])


def _intervals(repo: Path, names: list[str]) -> list[tuple[int, int]]:
    return sorted((int((repo / n / "begin").read_text()), int((repo / n / "end").read_text()))
                  for n in names)


def _load_order_repo(tmp_path: Path, names: list[str], peers: int) -> Path:
    repo = tmp_path / "repo"
    for name in names:
        shutil.copytree(MODELS / "load_order", repo / name)
        config = repo / name / "config.pbtxt"
        config.write_text(config.read_text() + (
            f'parameters {{ key: "peers" value: {{ string_value: "{peers}" }} }}\n'))
    return repo


def test_model_load_thread_count_1_loads_one_model_at_a_time(tmp_path):
    names = ["m1", "m2", "m3"]
    repo = _load_order_repo(tmp_path, names, peers=1)
    with running_server(repo, args=["--model-load-thread-count", "1"]):
        pass
    spans = _intervals(repo, names)
    for (_, end), (begin, _) in zip(spans, spans[1:]):
        assert end <= begin, spans


def test_model_load_thread_count_3_loads_them_together(tmp_path):
    names = ["m1", "m2", "m3"]
    repo = _load_order_repo(tmp_path, names, peers=3)
    with running_server(repo, args=["--model-load-thread-count", "3"]):
        pass
    spans = _intervals(repo, names)
    assert max(b for b, _ in spans) < min(e for _, e in spans), spans


def test_ignored_flags_are_accepted_and_named_in_a_warning(tmp_path):
    log = tmp_path / "log"
    args = ["--pinned-memory-pool-byte-size", "0", "--backend-directory", "/opt/x",
            "--host-policy", "gpu_0,numa-node=0", "--host-policy", "gpu_1,numa-node=1",
            "--backend-config", "python,shm-region-prefix-name=mine",
            "--backend-config", "python,default-max-batch-size=4"]
    with running_server(_repo(tmp_path, "log_probe"), args=args, log_path=log) as server:
        text = server.log_text()
    for flag in ("--pinned-memory-pool-byte-size", "--host-policy"):
        assert f"{flag} is accepted for compatibility with tritonserver and ignored" in text
    assert "--backend-config python,shm-region-prefix-name=mine is ignored" in text
    assert "default-max-batch-size" not in text  # used, so no warning
    assert "--backend-directory is accepted" not in text  # used now (docs/backends.md)
    assert "--model-load-thread-count" not in IGNORED


def test_cuda_memory_pool_byte_size_reaches_the_stubs_and_a_bad_one_is_refused(tmp_path):
    from pbserve.testing import stub_pids

    log = tmp_path / "log"
    args = ["--cuda-memory-pool-byte-size", "0:134217728",
            "--cuda-memory-pool-byte-size", "1:1048576"]
    repo = _repo(tmp_path, "log_probe")
    with running_server(repo, args=args, log_path=log) as server:
        text = server.log_text()
        commands = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    for pid in stub_pids(server.proc.pid)]
    assert "--cuda-memory-pool-byte-size is accepted" not in text  # used (docs/gpu.md)
    assert commands and all(b"0:134217728,1:1048576" in command for command in commands)
    done = _run_to_exit(repo, "--cuda-memory-pool-byte-size", "64M", timeout=60)
    assert done.returncode != 0
    assert "--cuda-memory-pool-byte-size option format is '<GPU device ID>:<pool byte " \
           "size>' with a positive size. Got 64M" in done.stdout + done.stderr
