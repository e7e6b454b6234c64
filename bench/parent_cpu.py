"""The CPU each thread of pbserve (the parent and its stubs) spends on one request, and
how long it waited for a CPU, under perf_analyzer load: the parent's thread is what the
64 B c=8 and batch rows of vs.py are bound by (docs/performance.md).

    python bench/parent_cpu.py [--model identity_fp32] [--protocol http] [--concurrency 8]

Starts pbserve on ../shared/perf/anchor_models, drives the model with perf_analyzer, and
reads each thread's /proc/PID/task/TID/schedstat (CPU time, time runnable but waiting for
a CPU) and context switches at two moments SECONDS apart, with the requests the server
completed between them (its statistics extension). No perf, no root: repeated runs of a
row agree within about 2 %, so a change of a few us a request shows, which throughput
pairs on this shared 2-core machine cannot. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from pbserve.testing import free_ports

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "perf"


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.load(reply)


def _completed(http: int, model: str) -> int:
    return _get(f"http://127.0.0.1:{http}/v2/models/{model}/stats")[
        "model_stats"][0]["inference_count"]


def _tree(root: int) -> list[int]:
    """root and its descendants (the stubs, started by the parent or its zygote)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _threads(pids: list[int]) -> dict[tuple[int, int], tuple[str, int, int, int]]:
    """(pid, tid) -> (name, CPU ns, wait ns, context switches)."""
    out = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            label = next((a.decode() for a in name if a.endswith(b"_0_0")), "parent")
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
    http, grpc, metrics = free_ports(3)
    work = Path(tempfile.mkdtemp(prefix="parent-cpu-"))
    server = subprocess.Popen(
        [*shlex.split(args.server), "--model-repository", str(SHARED / "anchor_models"),
         "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
         "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
         "--metrics-address", "127.0.0.1"],
        stdout=open(work / "server.log", "wb"), stderr=subprocess.STDOUT,
        start_new_session=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        port = grpc if args.protocol == "grpc" else http
        window_ms = int((args.seconds + 6) * 1000)
        pa = subprocess.Popen(
            ["bash", "-c", f"source {SHARED}/env_anchor.sh && exec $PERF_ANALYZER "
             f"-m {args.model} -i {args.protocol} -u 127.0.0.1:{port} "
             f"--shape INPUT0:{args.elements} --concurrency-range {args.concurrency} "
             f"--measurement-interval {window_ms} -s 999 --max-trials 3"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(3)
        pids = _tree(server.pid)
        before, done_before = _threads(pids), _completed(http, args.model)
        time.sleep(args.seconds)
        after, done_after = _threads(pids), _completed(http, args.model)
        pa.communicate(timeout=120)
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
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
