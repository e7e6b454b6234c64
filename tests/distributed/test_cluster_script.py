"""scripts/cluster.py: how it splits a repository between workers, and that SIGTERM or
SIGKILL leaves nothing behind (the conformance run checks SIGINT: test_conformance_cluster.py)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from pbserve.distributed import nats_store
from pbserve.testing import free_ports

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cluster.py"


def _script():
    spec = importlib.util.spec_from_file_location("cluster_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bls_callers_and_the_models_they_call_go_to_different_workers():
    cluster = _script()
    repo = ROOT / "tests" / "models"
    names = ["bls_chain_a", "bls_chain_b", "cancel_probe", "sleepy", "seq_pid"]
    first, second = cluster.split_models([repo], names, 2)
    assert {"bls_chain_a", "bls_chain_b"} <= set(first)  # both make BLS calls
    assert sorted(first + second) == sorted(names) and abs(len(first) - len(second)) <= 1
    halves = cluster.split_models([ROOT / "models/examples"], ["bls_pipeline", "add_sub",
                                                               "identity", "repeat"], 2)
    assert "bls_pipeline" in halves[0] and "add_sub" in halves[1]


def test_flags_are_taken_apart_for_workers_and_frontend():
    repos, loads, frontend, common, workers = _script().take_flags(
        ["--model-repository", "/r", "--http-port=8000", "--load-model", "*",
         "--log-verbose", "1", "--model-control-mode", "explicit", "--workers", "3"])
    assert (repos, loads, workers) == (["/r"], ["*"], 3)
    assert frontend == ["--http-port", "8000", "--model-control-mode", "explicit"]
    assert common == ["--log-verbose", "1"]


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


def _command_lines(pids: list[int]) -> list[str]:
    """The command lines of those of `pids` still running."""
    lines = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                lines.append(f.read().replace(b"\0", b" ").decode(errors="replace")[:200])
        except OSError:
            continue
    return lines


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_the_script_stops_the_frontend_workers_and_nats_server(tmp_path, sig):
    """SIGTERM: an orderly stop, status 0. SIGKILL: each process gets SIGTERM from the
    kernel as the script dies (PR_SET_PDEATHSIG) and stops on its own."""
    repo = tmp_path / "repo"
    for name in ("add_sub", "identity", "bls_pipeline"):
        shutil.copytree(ROOT / "models/examples" / name, repo / name)
    http, grpc, metrics = free_ports(3)
    log = open(tmp_path / "cluster.log", "wb")
    stores = tmp_path / "tmp"  # the script's temporary directory: its nats store
    stores.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--model-repository", str(repo), "--http-port",
         str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "TMPDIR": str(stores)})
    output = lambda: (tmp_path / "cluster.log").read_text(errors="replace")[-3000:]  # noqa: E731
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, output()
            assert time.monotonic() < deadline, "cluster not ready in 60 s"
            try:
                if client.is_server_ready() and client.is_model_ready("bls_pipeline"):
                    break
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            time.sleep(0.1)
        children = _children(proc.pid)
        assert len(children) == 4  # nats-server, two workers, the frontend
        x = np.arange(16, dtype=np.float32)
        tensor = httpclient.InferInput("INPUT", [16], "FP32")
        tensor.set_data_from_numpy(x)
        # bls_pipeline on one worker calls add_sub and identity on the other.
        result = client.infer("bls_pipeline", [tensor])
        np.testing.assert_allclose(result.as_numpy("OUTPUT"), 3 * (x - x.mean()))
        proc.send_signal(sig)
        assert proc.wait(60) == (0 if sig == signal.SIGTERM else -signal.SIGKILL), output()
        deadline = time.monotonic() + 60
        while [p for p in children if os.path.exists(f"/proc/{p}")]:
            assert time.monotonic() < deadline, (
                f"the cluster's processes outlived it: {_command_lines(children)}\n"
                f"{output()}")
            time.sleep(0.1)
        # The nats store: removed by the script on SIGTERM; after SIGKILL its lock is
        # free, and the next store made on the machine removes it.
        left = [p.name for p in stores.iterdir() if p.name.startswith(nats_store.PREFIX)]
        assert len(left) == (0 if sig == signal.SIGTERM else 1), left
        assert len(nats_store.sweep_orphans(str(stores))) == len(left)
        assert not [p for p in stores.iterdir() if p.name.startswith(nats_store.PREFIX)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_ctrl_c_with_the_output_through_tee_leaves_nothing_behind(tmp_path):
    """`scripts/cluster.py ... 2>&1 | tee log`, then Ctrl-C: SIGINT reaches the script, its
    workers and frontend, and tee, which dies: every later write of theirs finds a
    broken pipe. The script must still stop everything it started (issue 40: the
    frontend was left running, orphaned, and the nats store stayed)."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "models/examples" / "identity", repo / "identity")
    http, grpc, metrics = free_ports(3)
    stores = tmp_path / "tmp"
    stores.mkdir()
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--model-repository", str(repo), "--http-port",
         str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
        stdout=write_end, stderr=write_end, start_new_session=True,
        env={**os.environ, "TMPDIR": str(stores)})
    os.close(write_end)
    reader = os.fdopen(read_end, "rb")
    os.set_blocking(read_end, False)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        deadline = time.monotonic() + 60
        while not _ready(client, "identity"):
            assert proc.poll() is None and time.monotonic() < deadline, (
                (reader.read() or b"").decode(errors="replace")[-3000:])
            time.sleep(0.1)
        children = _children(proc.pid)
        reader.close()  # tee is gone ...
        os.killpg(proc.pid, signal.SIGINT)  # ... as Ctrl-C in the terminal ended it
        proc.wait(60)
        deadline = time.monotonic() + 60
        while [p for p in children if os.path.exists(f"/proc/{p}")]:
            assert time.monotonic() < deadline, (
                f"the cluster's processes outlived it: {_command_lines(children)}")
            time.sleep(0.1)
        assert not [p for p in stores.iterdir() if p.name.startswith(nats_store.PREFIX)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if not reader.closed:
            reader.close()


def _ready(client: httpclient.InferenceServerClient, model: str) -> bool:
    try:
        return client.is_server_ready() and client.is_model_ready(model)
    except Exception:  # noqa: BLE001 - not listening yet
        return False
