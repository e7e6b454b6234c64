"""The ceiling frontend processes imply on a machine with more cores: for each of vs.py's
64 B identity and workload rows, the CPU a request of pbserve's core process, of its
frontends and of its stubs, against the real Triton's whole process tree, in one run
(issue 42; docs/performance.md, "The ceiling, measured in one run").

    python bench/frontend_ceiling.py [--frontends 2] [--seconds 4] [--rows REGEX]

Starts `pbserve --frontend-processes N` and tritonserver (../shared/perf/setup_anchor.sh)
on ../shared/perf/anchor_models, both at once; for each row drives one, then the other,
with perf_analyzer (vs.py's row: model, protocol, concurrency, streaming), and reads each
process's CPU (/proc/PID/stat) over SECONDS with the requests the server completed
meanwhile (its statistics extension). What the core does a request does not spread over
cores, so a server whose frontends and instances are added as cores are is bound by
1 / (the core's CPU a request); Triton's whole tree spreads over every core, so C cores
take about C / (its tree's CPU a request). The last column is where they meet: the
cores above which Triton's ceiling passes pbserve's. An estimate from this machine's
figures (the kernel's TCP and wake-up costs are taken to scale as they do here); it
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import time
from pathlib import Path

from per_request import completed, tree_pids
from thread_cpu import SHARED, start_load, start_server, stop_server

HZ = os.sysconf("SC_CLK_TCK")
TRITON = (f"bash -c 'source {SHARED}/env_anchor.sh && exec \"$TRITON_BIN\" "
          f"--backend-directory=\"$TRITON_BACKENDS\" \"$@\"' tritonserver")
# vs.py's 64 B identity and workload rows: (label, model, protocol, concurrency, extra)
ROWS = [
    ("identity 64B gRPC c=1", "identity_fp32", "grpc", 1, ""),
    ("identity 64B gRPC c=8", "identity_fp32", "grpc", 8, ""),
    ("identity 64B HTTP c=1", "identity_fp32", "http", 1, ""),
    ("identity 64B HTTP c=8", "identity_fp32", "http", 8, ""),
    ("stream 32 x 64B gRPC c=1", "stream_fp32", "grpc", 1, "--streaming"),
    ("stream 32 x 64B gRPC c=8", "stream_fp32", "grpc", 8, "--streaming"),
    ("BLS 2 calls 64B gRPC c=1", "bls_fp32", "grpc", 1, ""),
    ("BLS 2 calls 64B HTTP c=8", "bls_fp32", "http", 8, ""),
    ("batch<=16 64B HTTP c=16", "batch_fp32", "http", 16, ""),
    ("ensemble 3 steps 64B gRPC c=1", "ens3_fp32", "grpc", 1, ""),
    ("ensemble 3 steps 64B HTTP c=8", "ens3_fp32", "http", 8, ""),
]


def _ticks(pid: int) -> int:
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, IndexError, ValueError):
        return 0


def _kind(pid: int, root: int) -> str:
    """core, frontend or stub (a stub, its zygote, anything else the core started)."""
    if pid == root:
        return "core"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "stub"
    return "frontend" if b"pbserve.cli.frontend_process" in cmdline else "stub"


def measure(server: subprocess.Popen, http: int, grpc: int, row: tuple, seconds: float
            ) -> tuple[float, dict[str, float]]:
    """Requests a second, and CPU us a request by kind of process (and "tree")."""
    _, model, protocol, concurrency, extra = row
    load = start_load(model, protocol, grpc if protocol == "grpc" else http, 16,
                      concurrency, seconds, extra)
    try:
        time.sleep(3)
        pids = tree_pids(server.pid)
        before = {pid: _ticks(pid) for pid in pids}
        done_before, started = completed(http, model), time.monotonic()
        time.sleep(seconds)
        after = {pid: _ticks(pid) for pid in pids}
        done_after, took = completed(http, model), time.monotonic() - started
    finally:
        load.kill()
        load.communicate()
    requests = max(done_after - done_before, 1)
    cpu: dict[str, float] = {"core": 0.0, "frontend": 0.0, "stub": 0.0}
    for pid in pids:
        cpu[_kind(pid, server.pid)] += (after[pid] - before[pid]) / HZ
    per = {kind: seconds_ * 1e6 / requests for kind, seconds_ in cpu.items()}
    per["tree"] = sum(cpu.values()) * 1e6 / requests
    return requests / took, per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frontends", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rows", default="", help="only the rows whose label matches")
    args = ap.parse_args()
    rows = [r for r in ROWS if re.search(args.rows, r[0])]
    pbserve = start_server(f"python -m pbserve --frontend-processes {args.frontends}",
                           "ceiling-pbserve-")
    try:
        triton = start_server(TRITON, "ceiling-triton-")
        try:
            results = []
            for row in rows:
                ours = measure(*pbserve, row, args.seconds)
                theirs = measure(*triton, row, args.seconds)
                results.append((row[0], ours, theirs))
        finally:
            stop_server(triton[0])
    finally:
        stop_server(pbserve[0])
    print(f"pbserve --frontend-processes {args.frontends} against tritonserver, CPU us a "
          f"request ({args.seconds:.0f} s a row; infer/s on this machine):")
    print(f"{'row':32} {'pb inf/s':>8} {'core':>6} {'fronts':>7} {'stubs':>6} "
          f"{'tree':>6} {'tr inf/s':>8} {'tr tree':>7} {'pb ceiling/s':>12} "
          f"{'tr /s a core':>12} {'cores':>6}")
    for label, (rate, per), (trate, tper) in results:
        per_core = 1e6 / tper["tree"]
        if per["core"] < 1:  # under 1 us: the core is not on the request's path
            bound = f"{'none':>12} {per_core:12,.0f} {'-':>6}"
        else:
            ceiling = 1e6 / per["core"]
            bound = f"{ceiling:12,.0f} {per_core:12,.0f} {ceiling / per_core:6.1f}"
        print(f"{label:32} {rate:8.0f} {per['core']:6.1f} {per['frontend']:7.0f} "
              f"{per['stub']:6.0f} {per['tree']:6.0f} {trate:8.0f} {tper['tree']:7.0f} "
              f"{bound}")
    print("ceiling = 1 / the core's CPU a request (frontends and instances added with the "
          "cores); cores = where Triton's tree, C / its CPU a request, reaches it.")


if __name__ == "__main__":
    main()
