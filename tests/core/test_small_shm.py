"""A small /dev/shm (Docker's default 64 MiB): queued requests hold no shared memory, the
pools grow on demand and shrink when idle, and only a request that cannot fit fails.

Each server runs in a mount namespace of its own with a tmpfs of the size under test on
/dev/shm (we are root: `unshare --mount`), so the real /dev/shm is never filled.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import running_server, stub_pids
from polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
CLIENTS = 8
REQUEST_BYTES = 16 * MIB


def _launcher(size: str) -> list[str]:
    mount = f"mount -t tmpfs -o size={size},mode=1777 tmpfs /dev/shm && exec \"$@\""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh"]


def _can_unshare() -> str | None:
    """None when a private tmpfs on /dev/shm can be made here, else why not."""
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run([*_launcher("1m"), "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot mount a private /dev/shm: {probe.stderr.strip()}"
    return None


pytestmark = pytest.mark.skipif(_can_unshare() is not None, reason=str(_can_unshare()))


def _repo(tmp_path: Path, copy_outputs: bool) -> Path:
    """models/examples/identity with two instances; `copy_outputs`: it answers with copies
    of its inputs, which its stub allocates (else the parent's input blocks are lent)."""
    model = tmp_path / "repo" / "identity"
    shutil.copytree(ROOT / "models" / "examples" / "identity", model)
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace("count: 1", "count: 2"))
    if copy_outputs:
        code = model / "1" / "model.py"
        code.write_text(code.read_text().replace("as_numpy())", "as_numpy().copy())"))
        assert ".copy()" in code.read_text()
    return model.parent


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return _repo(tmp_path, copy_outputs=False)


def _shm_used(pid: int) -> int:
    """Bytes in use on the server's own /dev/shm (seen through its mount namespace)."""
    stat = os.statvfs(f"/proc/{pid}/root/dev/shm")
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def _identity(client: httpclient.InferenceServerClient, data: np.ndarray) -> np.ndarray:
    tensor = httpclient.InferInput("INPUT_UINT8", list(data.shape), "UINT8")
    tensor.set_data_from_numpy(data, binary_data=True)
    wanted = [httpclient.InferRequestedOutput("OUTPUT_UINT8", binary_data=True)]
    return client.infer("identity", [tensor], outputs=wanted).as_numpy("OUTPUT_UINT8")


def _burst(url: str, count: int) -> list[bool]:
    """`count` concurrent 16 MiB requests, one client each: whether each came back whole."""
    def one(index: int) -> bool:
        data = np.full(REQUEST_BYTES, index, dtype=np.uint8)
        data[::4096] = np.arange(data[::4096].size, dtype=np.uint64).astype(np.uint8)
        client = httpclient.InferenceServerClient(url, network_timeout=120)
        try:
            return bool(np.array_equal(_identity(client, data), data))
        finally:
            client.close()

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


@pytest.mark.parametrize("copy_outputs", [False, True], ids=["lent", "copied"])
def test_eight_concurrent_16_mib_requests_pass_on_a_64_mib_dev_shm_and_the_pools_shrink(
        tmp_path, copy_outputs):
    repo = _repo(tmp_path, copy_outputs)
    with running_server(repo, log_path=tmp_path / "server.log",
                        launcher=_launcher("64m")) as server:
        idle = _shm_used(server.pid)  # the stubs' queues and nothing else
        for _ in range(2):
            assert _burst(server.http_url, CLIENTS) == [True] * CLIENTS, \
                server.log_text()[-3000:]
        # Given back when idle: every 16 MiB region goes, the start-up figure returns
        # (within the pools' first regions, 1 MiB each).
        wait_for(lambda: _shm_used(server.pid) <= idle + 3 * MIB,
                 "the pools to give their regions back")
        assert "Traceback" not in server.log_text()


def test_a_request_larger_than_dev_shm_fails_naming_its_size_and_the_server_serves(
        repo, tmp_path):
    with running_server(repo, log_path=tmp_path / "server.log",
                        launcher=_launcher("16m")) as server:
        client = server.http_client(network_timeout=60)
        with pytest.raises(InferenceServerException) as info:
            _identity(client, np.zeros(20 * MIB, dtype=np.uint8))
        message = str(info.value)
        assert str(20 * MIB) in message and "docker --shm-size" in message, message
        assert "Failed to increase the shared memory pool size" in message, message
        assert re.search(r"/dev/shm holds \d+ bytes in all", message), message
        assert info.value.status() == "507"
        small = np.arange(1000, dtype=np.uint8)
        assert np.array_equal(_identity(client, small), small)
        client.close()


def test_pool_sizes_come_from_backend_config(repo, tmp_path):
    args = ["--backend-config=python,shm-default-byte-size=2097152",
            "--backend-config=python,shm-growth-byte-size=3145728", "--log-verbose=1"]
    with running_server(repo, args=args, log_path=tmp_path / "server.log",
                        launcher=_launcher("64m")) as server:
        before = _shm_used(server.pid)
        client = server.http_client()
        small = np.arange(1000, dtype=np.uint8)
        assert np.array_equal(_identity(client, small), small)
        client.close()
        assert "is ignored" not in server.log_text()  # both settings are used
        # The parent's first region: the default size asked for, not 1 MiB.
        assert _shm_used(server.pid) - before >= 2 * MIB
        stubs = stub_pids(server.pid)
        assert stubs
        for pid in stubs:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert b"--shm-growth-byte-size" in command
            assert command[command.index(b"--shm-growth-byte-size") + 1] == b"3145728"


def test_a_bad_pool_size_stops_the_server_with_the_setting_named(repo, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pbserve", "--model-repository", str(repo),
         "--backend-config=python,shm-growth-byte-size=lots"],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode != 0
    assert "shm-growth-byte-size" in result.stderr and "lots" in result.stderr


def test_a_request_waiting_for_dev_shm_keeps_its_queue_timeout(tmp_path):
    """The dynamic batcher puts a request /dev/shm cannot take now back in its queue: it
    still times out as its queue policy says (Triton's 503), not after the /dev/shm wait."""
    model = tmp_path / "repo" / "identity"
    shutil.copytree(ROOT / "models" / "examples" / "identity", model)
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 0", "max_batch_size: 8")
                      + "dynamic_batching { default_queue_policy {"
                        " timeout_action: REJECT default_timeout_microseconds: 500000 } }\n")
    with running_server(model.parent, log_path=tmp_path / "server.log",
                        launcher=_launcher("16m")) as server:
        client = server.http_client(network_timeout=60)
        data = np.arange(4 * MIB, dtype=np.uint8).reshape(1, -1)
        filler = Path(f"/proc/{server.pid}/root/dev/shm/test_filler")
        stat = os.statvfs(filler.parent)
        with filler.open("wb") as out:  # /dev/shm full but for 256 KiB
            out.write(bytes(stat.f_bavail * stat.f_frsize - 256 * 1024))
        try:
            with pytest.raises(InferenceServerException) as info:
                _identity(client, data)
            assert info.value.message() == "Request timeout expired"
            assert info.value.status() == "503"
        finally:
            filler.unlink()
        assert np.array_equal(_identity(client, data), data)
        client.close()
