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
def test_every_conformance_case_passes():
    result = subprocess.run(
        [sys.executable, str(RUNNER), "--server-cmd", f"{sys.executable} -m pbserve"],
        capture_output=True, text=True, timeout=400)
    lines = result.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert result.returncode == 0 and not failed, "\n".join(lines[-60:]) + result.stderr[-2000:]
    assert lines[-1].endswith(" passed, 0 failed")
