"""The CPU each thread of pbserve (the parent and its stubs) spends on one request, and
how long it waited for a CPU, under perf_analyzer load: the parent's thread is what the
64 B c=8 and batch rows of vs.py are bound by (docs/performance.md).

    python bench/parent_cpu.py [--model identity_fp32] [--protocol http] [--concurrency 8]
    python bench/parent_cpu.py --server 'pbserve --frontend-processes 2'   # core + frontends

Starts pbserve on ../shared/perf/anchor_models, drives the model with perf_analyzer, and
reads each thread's /proc/PID/task/TID/schedstat (CPU time, time runnable but waiting for
a CPU) and context switches at two moments SECONDS apart, with the requests the server
completed between them (its statistics extension). No perf, no root: repeated runs of a
row agree within about 2 %, so a change of a few us a request shows, which throughput
pairs on this shared 2-core machine cannot. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from per_request import completed, tree_pids
from thread_cpu import start_load, start_server, stop_server


def _threads(pids: list[int]) -> dict[tuple[int, int], tuple[str, int, int, int]]:
    """(pid, tid) -> (name, CPU ns, wait ns, context switches)."""
    out = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            label = next((a.decode() for a in name if a.endswith(b"_0_0")), "parent")
            if b"pbserve.cli.frontend_process" in name:  # --frontend-processes N
                label = f"frontend {pid}"
            for tid in os.listdir(f"/proc/{pid}/task"):
                task = f"/proc/{pid}/task/{tid}"
                cpu, wait, _ = (int(x) for x in Path(f"{task}/schedstat").read_text().split())
                switches = sum(int(line.split()[1]) for line in
                               Path(f"{task}/status").read_text().splitlines()
                               if "ctxt_switches" in line)
                out[(pid, int(tid))] = (label, cpu, wait, switches)
        except OSError:
            continue
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default="pbserve")
    ap.add_argument("--model", default="identity_fp32")
    ap.add_argument("--protocol", default="http", choices=("grpc", "http"))
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--elements", type=int, default=16, help="INPUT0's FP32 elements")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    server, http, grpc = start_server(args.server, "parent-cpu-")
    try:
        port = grpc if args.protocol == "grpc" else http
        pa = start_load(args.model, args.protocol, port, args.elements, args.concurrency,
                        args.seconds)
        time.sleep(3)
        pids = tree_pids(server.pid)
        before, done_before = _threads(pids), completed(http, args.model)
        time.sleep(args.seconds)
        after, done_after = _threads(pids), completed(http, args.model)
        pa.communicate(timeout=120)
    finally:
        stop_server(server)
    requests = done_after - done_before
    print(f"{args.model} {args.protocol} c={args.concurrency}: "
          f"{requests / args.seconds:,.0f} infer/s; per request, by thread:")
    print(f"  {'thread':32} {'CPU us':>8} {'wait us':>8} {'switches':>9}")
    for key, (label, cpu, wait, switches) in sorted(after.items()):
        label0, cpu0, wait0, switches0 = before.get(key, (label, 0, 0, 0))
        if cpu - cpu0 < requests * 500:  # under 0.5 us a request: an idle thread
            continue
        print(f"  {label + ' ' + str(key[1]):32} {(cpu - cpu0) / requests / 1e3:8.1f} "
              f"{(wait - wait0) / requests / 1e3:8.1f} "
              f"{(switches - switches0) / requests:9.2f}")


if __name__ == "__main__":
    main()
