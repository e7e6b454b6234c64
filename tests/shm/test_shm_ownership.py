"""The dead-owner sweep across pid namespaces: /dev/shm shared by servers that cannot see
each other's pids (pods sharing a memory-backed emptyDir, `docker --ipc=host`). A sweep in
a namespace of its own must keep what a live server holds and remove what a dead one left.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from child_process import REPO
from client_inputs import http_input
from pbserve.testing import running_server
from shm.names import LOCK_SUFFIX, SHM_DIR, entries_with_prefix, new_prefix, unlink_prefix
from shm.region import Region

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]
SLEEPY = Path(__file__).resolve().parents[1] / "models" / "sleepy"


@pytest.fixture(scope="module")
def unshare() -> list[str]:
    """The launcher of a new pid namespace; the test is skipped where it is not allowed."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here")
    probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"a new pid namespace is not permitted here: {probe.stderr.strip()}")
    return UNSHARE


KILLED_OWNER = r"""
import os, signal
from shm.names import new_prefix
from shm.region import Region
prefix = new_prefix()
Region.create(prefix + "-r", 4096)
print(prefix, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # a killed server: its names and lock file stay
"""


def killed_owner_prefix() -> str:
    proc = subprocess.run([sys.executable, "-c", KILLED_OWNER], cwd=REPO,
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == -9, proc.stderr
    return proc.stdout.strip()


def test_a_sweep_in_another_pid_namespace_keeps_a_live_owner_and_clears_a_dead_one(unshare):
    live = new_prefix()  # this process: a live owner whose pid the namespace cannot see
    region = Region.create(live + "-r", 4096)
    dead = killed_owner_prefix()
    dead_key = dead.lstrip("/").rsplit("-", 1)[0]
    assert os.path.exists(os.path.join(SHM_DIR, dead_key + LOCK_SUFFIX))
    try:
        sweep = subprocess.run(
            [*unshare, sys.executable, "-c",
             "import os; from shm.names import sweep_dead_owners as s; "
             "assert os.getpid() < 10; print(sorted(s()))"],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert sweep.returncode == 0, sweep.stderr
        assert entries_with_prefix(live) == [live.lstrip("/") + "-r"]
        assert entries_with_prefix(dead) == []
        assert not os.path.exists(os.path.join(SHM_DIR, dead_key + LOCK_SUFFIX))
    finally:
        region.close()
        unlink_prefix(live)
        unlink_prefix(dead)


def test_a_server_starting_in_another_pid_namespace_leaves_a_running_one_alone(
        unshare, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(SLEEPY, repo / "sleepy")

    def sleepy_pid(server) -> int:
        reply = server.http_client().infer(
            "sleepy", [http_input("SLEEP_MS", np.array([0], np.int32))])
        return int(reply.as_numpy("PID")[0])

    with running_server(repo, log_path=tmp_path / "outside.log") as outside:
        sleepy_pid(outside)
        held = set(entries_with_prefix(f"/pbserve-{outside.pid}-"))
        assert any(name.endswith(LOCK_SUFFIX) for name in held)
        # Its start sweeps /dev/shm, where no pid of the server outside exists.
        with running_server(repo, log_path=tmp_path / "inside.log", launcher=unshare):
            assert held <= set(entries_with_prefix(f"/pbserve-{outside.pid}-"))
        assert held <= set(entries_with_prefix(f"/pbserve-{outside.pid}-"))
        sleepy_pid(outside)
