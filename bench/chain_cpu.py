"""The CPU a request costs the whole chain on this machine, pbserve beside the real
Triton 2.51: the server's process tree, perf_analyzer, and what stayed idle (issue 26).

On a machine whose CPUs the server and the client share, throughput is bounded by
(CPUs x busy fraction) / (server + client CPU a request): a server that idles CPUs
is bound by a serial step; one that leaves none idle, by its CPU a request.

    python bench/chain_cpu.py [--model batch_fp32] [--protocol http] [--concurrency 16]

For each server in turn (freshly started on ../shared/perf/anchor_models), perf_analyzer
drives the model as bench/parent_cpu.py does; after 3 s, /proc gives the CPU time of the
server's processes and of perf_analyzer's over SECONDS, and /proc/stat the idle time of
all CPUs; the statistics extension gives the requests completed. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from per_request import completed, tree_pids
from thread_cpu import SHARED, start_load, start_server, stop_server

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of `pids` (those still there)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total * _TICK_S


def _idle_s() -> float:
    """Idle + iowait seconds of all CPUs."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return (int(fields[4]) + int(fields[5])) * _TICK_S


def measure(server_cmd: str, args: argparse.Namespace) -> str:
    server, http, grpc = start_server(server_cmd, "chain-cpu-")
    try:
        port = grpc if args.protocol == "grpc" else http
        load = start_load(args.model, args.protocol, port, args.elements, args.concurrency,
                          args.seconds)
        time.sleep(3)
        ours, theirs = tree_pids(server.pid), tree_pids(load.pid)
        before = (_cpu_s(ours), _cpu_s(theirs), _idle_s(), completed(http, args.model),
                  time.monotonic())
        time.sleep(args.seconds)
        after = (_cpu_s(ours), _cpu_s(theirs), _idle_s(), completed(http, args.model),
                 time.monotonic())
        load.communicate(timeout=120)
    finally:
        stop_server(server)
    server_s, client_s, idle_s, requests, wall_s = (b - a for a, b in zip(before, after))
    us = 1e6 / max(requests, 1)
    return (f"{requests / wall_s:9,.0f} infer/s  server {server_s * us:6.1f} us "
            f"({server_s / wall_s:.2f} CPUs)  perf_analyzer {client_s * us:6.1f} us "
            f"({client_s / wall_s:.2f})  idle {idle_s / wall_s:.2f} CPUs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="batch_fp32")
    ap.add_argument("--protocol", default="http", choices=("grpc", "http"))
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--elements", type=int, default=16, help="INPUT0's FP32 elements")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, str(SHARED))
    import vs  # ../shared/perf/vs.py: the real tritonserver's command, as vs.py runs it

    print(f"{args.model} {args.protocol} c={args.concurrency}, a request's CPU:")
    for round_ in range(args.rounds):
        for name, cmd in (("pbserve", "pbserve"), ("triton", shlex.join(vs.TRITON_CMD))):
            print(f"  {round_ + 1} {name:8} {measure(cmd, args)}", flush=True)


if __name__ == "__main__":
    main()
