"""The shared conformance suite (Triton's behaviour, driven with tritonclient) as a test.

It runs `../shared/conformance/run.py` against the installed `pbserve` for the cases
pbserve has resolved so far; a case that regresses fails this test with its reason.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "run.py"
RESOLVED = [
    # foundation (issue 3)
    "add_sub_http", "metadata_and_health", "unknown_model", "dtypes_binary", "dtypes_json",
    "bytes_strings", "error_raised", "error_returned", "initialize_args", "two_instances",
    "syntax_error_model", "load_unload", "large_tensor_64mib", "logger", "metrics_counters",
    "stub_crash_restart",
    # beyond it so far
    "dynamic_batching", "optional_input", "request_parameters", "auto_complete_config",
    # gRPC, decoupled and async (issue 7)
    "grpc_add_sub", "grpc_metadata", "grpc_tensors", "grpc_errors", "decoupled_stream",
    "async_execute_overlap", "async_execute_exception",
    # BLS and cancellation (issue 5)
    "bls_sync", "bls_async", "bls_decoupled", "bls_missing_model", "cancellation",
]


@pytest.mark.skipif(not RUNNER.exists(), reason=f"conformance suite not found at {RUNNER}")
def test_conformance_cases_resolved_so_far_pass():
    result = subprocess.run(
        [sys.executable, str(RUNNER), "--server-cmd", f"{sys.executable} -m pbserve",
         "--only", ",".join(RESOLVED)],
        capture_output=True, text=True, timeout=400)
    lines = result.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert result.returncode == 0 and not failed, "\n".join(lines[-60:]) + result.stderr[-2000:]
    assert lines[-1] == f"{len(RESOLVED) + 2} passed, 0 failed"
