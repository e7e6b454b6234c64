"""The parent -> stub -> parent hop as a running server pays it, under perf_analyzer load.

    python bench/server_hop.py [--seconds 4] [--protocol http] [--concurrency 1 8]

Starts pbserve (this checkout) on ../shared/perf/anchor_models, drives `identity_fp32`
(64 B) with perf_analyzer at each concurrency, and prints for each run:
- infer/s and p50 as perf_analyzer sees them;
- the hop: the statistics extension's compute_infer per request (EXECUTE sent until the
  answer is read; for a request that waited in the stub's queue, from when it started),
  read from /v2/models/identity_fp32/stats before and after the run;
- the server's queue time per request;
- CPU per request of the parent and of the model's stub (from /proc), which is what the
  hop costs besides waiting.
bench/ipc.py measures the same hop in a tight loop with nothing else running; this one
measures it with the frontends, the client and both processes' wake-ups in the way, and
its figures are the ones vs.py's `srv-inf` column reports. Nothing is asserted.
perf_analyzer is taken from $PERF_ANALYZER or /tmp/anchor-venv (../shared/perf/setup_anchor.sh).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pbserve.testing import RunningServer  # noqa: E402
from proc_cpu import cpu_s  # noqa: E402

SHARED = ROOT.parent / "shared" / "perf"
MODEL = "identity_fp32"


def perf_analyzer() -> tuple[str, dict[str, str]]:
    """perf_analyzer's path and the environment its libraries need (env_anchor.sh)."""
    script = SHARED / "env_anchor.sh"
    out = subprocess.run(["bash", "-c", f"source {script} && env -0"], capture_output=True,
                         check=True).stdout
    env = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    path = os.environ.get("PERF_ANALYZER") or env["PERF_ANALYZER"]
    if not os.access(path, os.X_OK):
        sys.exit(f"no perf_analyzer at {path}: run {SHARED / 'setup_anchor.sh'}")
    return path, env


def stub_pid(server_pid: int) -> int:
    """The identity model's stub: the one whose command line names its instance."""
    from pbserve.testing import stub_pids

    for pid in stub_pids(server_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(part.startswith(MODEL.encode()) for part in cmd):
            return pid
    raise RuntimeError("the identity model's stub was not found")


def stats(url: str) -> tuple[int, int, int]:
    """(requests executed, compute_infer ns, queue ns) from the statistics extension."""
    with urllib.request.urlopen(f"http://{url}/v2/models/{MODEL}/stats") as r:
        s = json.load(r)["model_stats"][0]["inference_stats"]
    return s["compute_infer"]["count"], s["compute_infer"]["ns"], s["queue"]["ns"]


def run(server: RunningServer, pa: str, env: dict, protocol: str, concurrency: int,
        seconds: float) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    stub = stub_pid(server.pid)
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "pa.csv"
        before = stats(server.http_url), cpu_s(server.pid), cpu_s(stub)
        subprocess.run([pa, "-m", MODEL, "-i", protocol, "-u", url, "--shape", "INPUT0:16",
                        "--concurrency-range", str(concurrency), "--measurement-interval",
                        str(int(seconds * 1000)), "--stability-percentage", "50",
                        "--max-trials", "4", "-f", str(csv_path)],
                       env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.STDOUT)
        after = stats(server.http_url), cpu_s(server.pid), cpu_s(stub)
        with open(csv_path, newline="") as f:
            row = list(csv.DictReader(f))[-1]
    count = after[0][0] - before[0][0]
    hop_us = (after[0][1] - before[0][1]) / count / 1000
    queue_us = (after[0][2] - before[0][2]) / count / 1000
    parent_us = (after[1] - before[1]) / count * 1e6
    stub_us = (after[2] - before[2]) / count * 1e6
    print(f"{protocol:5s} c={concurrency:<2d} {float(row['Inferences/Second']):9.1f} infer/s  "
          f"p50 {float(row['p50 latency']):7.0f} us  hop {hop_us:6.1f} us  queue "
          f"{queue_us:6.1f} us  CPU/request: parent {parent_us:5.1f} us, stub "
          f"{stub_us:5.1f} us  ({count} requests)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measurement window")
    parser.add_argument("--protocol", nargs="+", default=["http", "grpc"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    pa, env = perf_analyzer()
    server = RunningServer([SHARED / "anchor_models"], ["--log-verbose", "0"])
    try:
        server.wait_ready()
        for protocol in args.protocol:
            for concurrency in args.concurrency:
                run(server, pa, env, protocol, concurrency, args.seconds)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
