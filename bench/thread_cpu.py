"""Where a request's CPU goes, per thread of the whole machine, under perf_analyzer load.

    python bench/thread_cpu.py [--server pbserve] [--protocol grpc] [--concurrency 8]
    python bench/thread_cpu.py --server 'python bench/grpc_echo/vs_server.py grpcio-aio'

Starts the server command on ../shared/perf/anchor_models with tritonserver's port flags
(as ../shared/perf/vs.py does), drives `identity_fp32` (64 B) with perf_analyzer, samples
every CPU with `perf record -a` (1 kHz) while it runs, and prints each busy thread's CPU
per request (the server's threads, the stub, perf_analyzer, idle) and, for the busiest
server thread, its CPU per request by library and by symbol. py-spy sees only Python
frames; this shows the native part (kernel, libpython, grpcio's core) too. Needs `perf`
(linux-tools) and root or perf_event_paranoid <= 1. Nothing is asserted; run it under the
exclusive CPU lock on a quiet machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pbserve.testing import free_ports

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "perf"
HZ = 1000


def _wait_ready(http: int, timeout_s: float = 60) -> None:
    import urllib.request
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def start_server(command: str, prefix: str) -> tuple[subprocess.Popen, int, int]:
    """`command` serving ../shared/perf/anchor_models with tritonserver's port flags (as
    vs.py starts it), ready; the process and its HTTP and gRPC ports. Its log lives in a
    temporary directory that `stop_server` removes (one that never got ready prints the
    log's end first)."""
    http, grpc, metrics = free_ports(3)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    server = subprocess.Popen(
        [*shlex.split(command), "--model-repository", str(SHARED / "anchor_models"),
         "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
         "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
         "--metrics-address", "127.0.0.1"],
        stdout=open(work / "server.log", "wb"), stderr=subprocess.STDOUT,
        start_new_session=True, cwd=ROOT)
    server.work = work  # type: ignore[attr-defined]
    try:
        _wait_ready(http)
    except BaseException:
        stop_server(server, show_log=True)
        raise
    return server, http, grpc


def stop_server(server: subprocess.Popen, show_log: bool = False) -> None:
    os.killpg(server.pid, signal.SIGINT)
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    work = getattr(server, "work", None)
    if work is not None:
        if show_log:
            print((work / "server.log").read_text(errors="replace")[-3000:], file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)


def start_load(model: str, protocol: str, port: int, elements: int, concurrency: int,
               seconds: float, extra: str = "") -> subprocess.Popen:
    """perf_analyzer on `model`, with windows long enough to cover `seconds` of
    measuring after a 3 s start (it reports their average); read its stdout at the end.
    `extra`: more of its flags (--streaming)."""
    window_ms = int((seconds + 6) * 1000)
    return subprocess.Popen(
        ["bash", "-c", f"source {SHARED}/env_anchor.sh && exec $PERF_ANALYZER "
         f"-m {model} -i {protocol} -u 127.0.0.1:{port} --shape INPUT0:{elements} "
         f"--concurrency-range {concurrency} --measurement-interval {window_ms} "
         f"-s 999 --max-trials 3 {extra}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _samples(data: str) -> list[tuple[str, str, str, str]]:
    """(pid/tid, comm, dso, symbol) of each sample's leaf frame."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*(.+?)\s+(\d+)/(\d+)\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
        if m:
            comm, pid, tid, sym, dso = m.groups()
            rows.append((f"{pid}/{tid}", comm, dso.rsplit("/", 1)[-1], sym.split("+0x")[0]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default="pbserve")
    ap.add_argument("--protocol", default="grpc", choices=("grpc", "http"))
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--model", default="identity_fp32", help="e.g. batch_fp32 (vs.py's batch row)")
    ap.add_argument("--elements", type=int, default=16,
                    help="INPUT0's FP32 elements (vs.py's 16 MiB rows: 4194304)")
    args = ap.parse_args()
    server, http, grpc = start_server(args.server, "thread-cpu-")
    try:
        port = grpc if args.protocol == "grpc" else http
        pa = start_load(args.model, args.protocol, port, args.elements, args.concurrency,
                        args.seconds)
        time.sleep(3)
        data = str(Path(tempfile.mkdtemp(prefix="thread-cpu-")) / "perf.data")
        subprocess.run(["perf", "record", "-a", "-F", str(HZ), "-o", data, "--",
                        "sleep", str(args.seconds)], capture_output=True, check=True)
        text, _ = pa.communicate(timeout=120)
        rates = re.findall(r"Throughput: ([\d.]+) infer/sec", text)
        if not rates:
            sys.exit("perf_analyzer gave no throughput:\n" + text[-2000:])
        rate = float(rates[-1])
        rows = _samples(data)
    finally:
        stop_server(server)
    us = 1e6 / HZ / args.seconds / rate  # one sample, as us of CPU per request
    print(f"{args.server!r} {args.protocol} c={args.concurrency}: {rate:,.0f} infer/s; "
          f"CPU per request by thread (us):")
    threads = collections.Counter((tid, comm) for tid, comm, _, _ in rows)
    for (tid, comm), n in threads.most_common(12):
        print(f"  {n * us:7.1f}  {comm} {tid}")
    print("by process (us per request)")
    procs = collections.Counter((tid.split("/")[0], comm) for tid, comm, _, _ in rows)
    for (pid, comm), n in procs.most_common(8):
        print(f"  {n * us:7.1f}  {comm} {pid}")
    busiest = next(t for (t, c), _ in threads.most_common() if c not in ("swapper",)
                   and not c.startswith(("perf_analyzer", "event_engine")))
    mine = [(dso, sym) for tid, _, dso, sym in rows if tid == busiest]
    print(f"busiest server thread {busiest}: by library (us per request)")
    for dso, n in collections.Counter(d for d, _ in mine).most_common(6):
        print(f"  {n * us:7.1f}  {dso}")
    print("by symbol")
    for (dso, sym), n in collections.Counter(mine).most_common(args.top):
        print(f"  {n * us:7.1f}  {dso[:24]:24} {sym[:70]}")


if __name__ == "__main__":
    sys.exit(main())
