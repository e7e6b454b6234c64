"""The shared conformance suite (Triton's behaviour, driven with tritonclient) as a test.

It runs `../shared/conformance/run.py` against the installed `pbserve`: every case,
plus its shutdown and shared-memory leak checks, must pass.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[3] / "shared" / "conformance" / "run.py"


@pytest.mark.skipif(not RUNNER.exists(), reason=f"conformance suite not found at {RUNNER}")
@pytest.mark.parametrize("frontends", [1, 2], ids=["in-process", "2-frontend-processes"])
def test_every_conformance_case_passes(frontends):
    """Once as the server runs by default, once with HTTP and gRPC answered by two
    frontend processes (docs/frontend_processes.md)."""
    command = f"{sys.executable} -m pbserve"
    if frontends > 1:
        command += f" --frontend-processes {frontends}"
    result = subprocess.run(
        [sys.executable, str(RUNNER), "--server-cmd", command],
        capture_output=True, text=True, timeout=400)
    lines = result.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert result.returncode == 0 and not failed, "\n".join(lines[-60:]) + result.stderr[-2000:]
    assert lines[-1].endswith(" passed, 0 failed")
