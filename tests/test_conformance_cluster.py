"""The shared conformance suite through a cluster (scripts/cluster.py): a nats-server,
two workers each loading half of the suite's models (the BLS callers on one, the models
they call on the other) and a frontend that gets the runner's flags.

A subset keeps the suite fast: unary HTTP and gRPC, an unknown model, a decoupled
stream, every BLS case (each crossing workers), cancellation, load/unload and a failed
load through the frontend, a crashing stub; plus the runner's shutdown and shared-memory
leak checks. Left out of every run: the 64 MiB tensors (large_tensor_64mib,
grpc_tensors: the request plane carries tensors inline, up to NATS's max payload) and
metrics_counters (a frontend serves no metrics of its workers' models).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT.parent / "shared" / "conformance" / "run.py"
CASES = ["add_sub_http", "unknown_model", "grpc_add_sub", "decoupled_stream",
         "async_execute_overlap", "bls_sync", "bls_async", "bls_decoupled",
         "bls_missing_model", "cancellation", "syntax_error_model", "load_unload",
         "stub_crash_restart"]


@pytest.mark.skipif(not RUNNER.exists(), reason=f"conformance suite not found at {RUNNER}")
def test_conformance_cases_pass_through_a_two_worker_cluster(tmp_path):
    cmd = f"{sys.executable} {ROOT / 'scripts' / 'cluster.py'}"
    result = subprocess.run(
        [sys.executable, str(RUNNER), "--server-cmd", cmd, "--only", ",".join(CASES),
         "--keep-logs", str(tmp_path)], capture_output=True, text=True, timeout=300)
    lines = result.stdout.splitlines()
    passed = {line.split()[1] for line in lines if line.startswith("PASS")}
    assert result.returncode == 0, "\n".join(lines[-40:]) + result.stderr[-2000:]
    assert passed == {*CASES, "shutdown", "shm_leak"}
    assert lines[-1] == f"{len(CASES) + 2} passed, 0 failed"
    # The BLS cases crossed workers: callers on worker1, the models they call on worker2.
    split = {line.split()[2]: set(line.split(" loads ")[1].split(", "))
             for line in (tmp_path / "server.log").read_text().splitlines()
             if line.startswith("# cluster: worker")}
    assert {"bls_sync", "bls_async", "bls_decoupled", "bls_missing"} <= split["worker1"]
    assert {"add_sub", "repeat_decoupled"} <= split["worker2"]
