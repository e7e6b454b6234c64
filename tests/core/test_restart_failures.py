"""A restart that fails for a reason of the system (here: the model's interpreter is gone)
is tried again, logged and counted; queued requests do not wait for it forever."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from client_inputs import http_input
from pbserve.testing import running_server
from polling import wait_for

SLEEPY = Path(__file__).resolve().parents[1] / "models" / "sleepy"
WAIT_S = 2  # --restart-wait-secs


def model_with_own_interpreter(tmp_path: Path) -> tuple[Path, Path]:
    """A repository whose model runs in an EXECUTION_ENV_PATH environment; the path of
    that environment's interpreter (a script starting this test's Python)."""
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    repo = tmp_path / "repo"
    shutil.copytree(SLEEPY, repo / "sleepy")
    config = repo / "sleepy" / "config.pbtxt"
    config.write_text(config.read_text() + (
        'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "%s" } }\n' % env))
    return repo, python


def call(server, ms: int = 0) -> int:
    result = server.http_client().infer("sleepy",
                                        [http_input("SLEEP_MS", np.array([ms], np.int32))])
    return int(result.as_numpy("PID")[0])


def restart_failures(server) -> float:
    text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith('pbserve_stub_restart_failures{model="sleepy",version="1"}'):
            return float(line.split()[-1])
    raise AssertionError("no pbserve_stub_restart_failures for sleepy")


def test_a_restart_failing_with_an_os_error_is_retried_and_queued_requests_fail_after_a_bound(
        tmp_path):
    repo, python = model_with_own_interpreter(tmp_path)
    with running_server(repo, log_path=tmp_path / "log",
                        args=["--restart-wait-secs", str(WAIT_S)]) as server:
        pid = call(server)
        assert restart_failures(server) == 0
        python.rename(python.with_name("gone"))  # the environment lost its interpreter
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "restart of 'sleepy_0_0' failed: FileNotFoundError" in
                 server.log_text(), "a restart to fail for want of the interpreter")
        assert restart_failures(server) >= 1

        # Queued meanwhile: it waits for the instance, but not beyond the bound.
        with pytest.raises(InferenceServerException) as queued:
            call(server)
        assert queued.value.status() == "503", queued.value
        assert "sleepy" in queued.value.message()
        assert "FileNotFoundError" in queued.value.message()
        assert not server.http_client().is_model_ready("sleepy")
        with pytest.raises(InferenceServerException) as refused:  # at once, past the bound
            call(server)
        assert refused.value.status() == "503"

        assert restart_failures(server) >= 2  # tried again, and again
        python.with_name("gone").rename(python)
        wait_for(lambda: server.http_client().is_model_ready("sleepy"),
                 "the instance to come back", timeout_s=60)
        assert call(server) not in (pid, None)
    assert "Traceback" not in server.log_text()


FLAKY = Path(__file__).resolve().parents[1] / "models_restart" / "flaky_init"


def test_a_sequence_model_without_instances_fails_what_is_queued_and_serves_again(tmp_path):
    """The sequence batcher gives up the queued requests (and their sequences' slots) too,
    and goes on serving new sequences once an instance is back."""
    repo = tmp_path / "repo"
    shutil.copytree(FLAKY, repo / "flaky_init")
    config = repo / "flaky_init" / "config.pbtxt"
    config.write_text(config.read_text() + "sequence_batching { direct { } }\n")
    marker = repo / "flaky_init" / "fail_init"
    with running_server(repo, log_path=tmp_path / "log",
                        args=["--restart-wait-secs", "1"]) as server:
        def step(sid: int, start: bool = False) -> int:
            result = server.http_client().infer(
                "flaky_init", [http_input("X", np.array([0], np.int32))], sequence_id=sid,
                sequence_start=start)
            return int(result.as_numpy("PID")[0])

        pid = step(7, start=True)
        marker.touch()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "restart of 'flaky_init_0' failed" in server.log_text(),
                 "a restart to fail")
        with pytest.raises(InferenceServerException) as queued:
            step(7)  # queued for sequence 7's slot, on the instance that cannot come back
        assert queued.value.status() == "503" and "fail_init" in queued.value.message()
        marker.unlink()
        wait_for(lambda: server.http_client().is_model_ready("flaky_init"),
                 "the instance to come back", timeout_s=60)
        assert step(9, start=True) != pid  # the only slot was given up: a new sequence runs
