"""The real Triton 2.51 beside pbserve in a bench: its environment and a running
tritonserver (`bash ../shared/perf/setup_anchor.sh` puts both in /tmp/anchor-venv).
The benches that take turns between the two servers share these."""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator, Sequence

from pbserve.testing import free_ports, stop_process_group

PERF_DIR = Path(__file__).resolve().parents[2] / "shared" / "perf"


def anchor_env(need: Sequence[str] = ("PERF_ANALYZER",)) -> dict | None:
    """The environment env_anchor.sh sets up, or None when it is missing or any of the
    executables named by `need` (its variables) is not there."""
    script = PERF_DIR / "env_anchor.sh"
    if not script.exists():
        return None
    r = subprocess.run(["bash", "-c", f"source {shlex.quote(str(script))} && env -0"],
                       capture_output=True, timeout=30)
    env = dict(item.split("=", 1) for item in r.stdout.decode(errors="replace").split("\0")
               if "=" in item)
    ok = all(env.get(k) and os.access(env[k], os.X_OK) for k in need)
    return env if ok else None


@contextlib.contextmanager
def running_triton(repo: Path, env: dict, args: Sequence[str] = (),
                   ready_timeout: float = 60) -> Iterator[tuple[str, str]]:
    """(gRPC url, HTTP url) of a fresh tritonserver on `repo` (loopback, free ports),
    with `args` added; stopped with its process group."""
    http, grpc, metrics = free_ports(3)
    argv = [env["TRITON_BIN"], "--model-repository", str(repo), "--backend-directory",
            env["TRITON_BACKENDS"], *args, "--http-port", str(http), "--grpc-port",
            str(grpc), "--metrics-port", str(metrics), "--http-address", "127.0.0.1",
            "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("tritonserver did not get ready") from None
                time.sleep(0.2)
        yield f"127.0.0.1:{grpc}", f"127.0.0.1:{http}"
    finally:
        stop_process_group(proc, 30)
