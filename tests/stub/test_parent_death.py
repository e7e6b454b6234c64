"""A killed server takes its stubs with it, even while `execute` runs or hangs."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from client_inputs import http_input
from pbserve.testing import RunningServer, running_server
from polling import wait_for
from shm.names import entries_with_prefix

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
MODEL = """
import ctypes, os, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        with open(os.path.join(os.path.dirname(__file__), "started"), "w") as f:
            f.write(str(os.getpid()))
        {wait}
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "PID", np.array([os.getpid()], np.int64))]) for _ in requests]
"""
WAITS = {
    "sleeps": "time.sleep(10)",
    # A model stuck in C code that holds the GIL: no thread of the stub can run.
    "hangs": "ctypes.PyDLL(None).sleep(3600)",
}


def model_repo(tmp_path: Path, name: str) -> Path:
    version = tmp_path / "repo" / name / "1"
    version.mkdir(parents=True)
    (version.parent / "config.pbtxt").write_text(CONFIG.format(name=name))
    (version / "model.py").write_text(MODEL.format(wait=WAITS[name]))
    return tmp_path / "repo"


def send_and_forget(server: RunningServer, name: str) -> threading.Thread:
    def call() -> None:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        try:
            client.infer(name, [http_input("X", np.array([0], np.int32))])
        except Exception:  # noqa: BLE001 - the server dies under it: that is the point
            pass
        finally:
            client.close()

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("name", list(WAITS))
def test_a_killed_server_takes_its_stub_along_even_mid_execute(tmp_path, name):
    repo = model_repo(tmp_path, name)
    started = repo / name / "1" / "started"
    server = RunningServer([repo], log_path=tmp_path / "log")
    try:
        server.wait_ready()
        caller = send_and_forget(server, name)
        wait_for(lambda: started.exists() and started.read_text(), "execute to start")
        stub_pid = int(started.read_text())
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait(10)
        wait_for(lambda: not os.path.exists(f"/proc/{stub_pid}"),
                 f"the stub ({name}) to end with its server", timeout_s=5)
        caller.join(10)
    finally:
        server.stop()
    # A killed server cannot clean up; the next one to start removes what it left.
    with running_server(repo, log_path=tmp_path / "next.log"):
        assert entries_with_prefix(f"/pbserve-{server.pid}-") == []
