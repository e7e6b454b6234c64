"""The shared conformance suite through a cluster (scripts/cluster.py): a nats-server,
two workers each loading half of the suite's models (the BLS callers on one, the models
they call on the other) and a frontend that gets the runner's flags.

Every case of the suite runs (the 64 MiB tensors go by the data plane, the frontend's
/metrics sums its workers' counters), plus the runner's shutdown and shared-memory leak
checks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT.parent / "shared" / "conformance" / "run.py"
@pytest.mark.skipif(not RUNNER.exists(), reason=f"conformance suite not found at {RUNNER}")
def test_conformance_cases_pass_through_a_two_worker_cluster(tmp_path):
    cases = subprocess.run([sys.executable, str(RUNNER), "--list"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert "large_tensor_64mib" in cases and "metrics_counters" in cases
    cmd = f"{sys.executable} {ROOT / 'scripts' / 'cluster.py'}"
    result = subprocess.run(
        [sys.executable, str(RUNNER), "--server-cmd", cmd, "--keep-logs", str(tmp_path)],
        capture_output=True, text=True, timeout=400)
    lines = result.stdout.splitlines()
    passed = {line.split()[1] for line in lines if line.startswith("PASS")}
    assert result.returncode == 0, "\n".join(lines[-40:]) + result.stderr[-2000:]
    assert passed == {*cases, "shutdown", "shm_leak"}
    assert lines[-1] == f"{len(cases) + 2} passed, 0 failed"
    # The BLS cases crossed workers: callers on worker1, the models they call on worker2.
    split = {line.split()[2]: set(line.split(" loads ")[1].split(", "))
             for line in (tmp_path / "server.log").read_text().splitlines()
             if line.startswith("# cluster: worker")}
    assert {"bls_sync", "bls_async", "bls_decoupled", "bls_missing"} <= split["worker1"]
    assert {"add_sub", "repeat_decoupled"} <= split["worker2"]
