"""What a request costs each server in CPU, system calls and context switches, pbserve
beside the real Triton 2.51, on vs.py's rows (issue 26: "fewer wake-ups and system calls
a request, measured beside Triton's").

For each row and server (one server running at a time, freshly started on
`../shared/perf/anchor_models`): perf_analyzer drives the row's model as vs.py does; after
2 s, `perf stat` counts, over 3 s, the system calls (`raw_syscalls:sys_enter`), context
switches and CPU time of every thread of the server's process tree (stubs included), and
the statistics extension gives the requests the server completed in that window. Prints
each per request. perf_analyzer's own CPU is not counted. Needs `perf` with tracepoints
(root or perf_event_paranoid <= 1).

    python bench/per_request.py [--rows '64B-(grpc|http)-c1|work'] [--seconds 3]
        [--b 'pbserve --frontend-processes 2'] [--by-process]

`--b CMD`: a second pbserve command in Triton's place (two frontends against one
process: docs/performance.md, "Where two frontends' extra CPU goes"). `--by-process`: a
line for each process of the tree that ran (the server or core, each frontend, each
stub) besides the tree's.

Throughput on a saturated 2-core machine is about 1 / (the CPU a request costs the server
and the client): the CPU column is what the c=8 and c=16 rows trade in. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent


def tree_pids(root: int) -> list[int]:
    """root and its descendants."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def completed(http_port: int, model: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{model}/stats") as r:
        return int(json.load(r)["model_stats"][0]["inference_count"])


def perf_stat(pids: list[int], seconds: float) -> dict[str, float]:
    """Counts over `seconds` for every thread of `pids`."""
    with tempfile.NamedTemporaryFile("r", suffix=".csv") as out:
        subprocess.run(["perf", "stat", "-x", ",", "-o", out.name, "-e",
                        "raw_syscalls:sys_enter,context-switches,task-clock",
                        "-p", ",".join(map(str, pids)), "--", "sleep", str(seconds)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        counts = {}
        for line in out.read().splitlines():
            fields = line.split(",")
            if len(fields) > 3 and not line.startswith("#"):
                try:
                    counts[fields[2]] = float(fields[0])
                except ValueError:
                    pass
        return counts


EVENTS = ("task-clock", "raw_syscalls:sys_enter", "context-switches")


def _print(label: str, name: str, rate: float | None, counts: dict[str, float],
           n: int) -> None:
    """A line: CPU us, system calls and context switches a request (of `n`)."""
    shown = "" if rate is None else f"{rate:8.0f}"
    print(f"{label:<28} {name:<16} {shown:>8} "
          f"{counts.get('task-clock', 0) * 1000 / n:7.1f} "
          f"{counts.get('raw_syscalls:sys_enter', 0) / n:8.2f} "
          f"{counts.get('context-switches', 0) / n:7.2f}", flush=True)


def perf_stat_each(pids: list[int], seconds: float) -> dict[int, dict[str, float]]:
    """`perf_stat` of each of `pids` on its own, over the same `seconds`."""
    with ThreadPoolExecutor(len(pids)) as pool:
        return dict(zip(pids, pool.map(lambda pid: perf_stat([pid], seconds), pids)))


def process_kind(pid: int, root: int) -> str:
    """server (the core, with frontend processes), frontend, zygote or stub."""
    if pid == root:
        return "server"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    if b"pbserve.cli.frontend_process" in argv:
        return "frontend"
    return "zygote" if b"stub.zygote" in argv else "stub"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--perf-dir", default=str(HERE.parent.parent / "shared" / "perf"))
    ap.add_argument("--pbserve", default="pbserve", help="pbserve's command")
    ap.add_argument("--rows", default="64B|work")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--b", default="", help="a second pbserve command, in Triton's place")
    ap.add_argument("--by-process", action="store_true",
                    help="a line for each process of the tree besides the tree's")
    args = ap.parse_args()
    sys.path.insert(0, args.perf_dir)
    import vs  # ../shared/perf/vs.py

    pa = os.path.join(os.environ.get("ANCHOR_VENV", "/tmp/anchor-venv"), "bin", "perf_analyzer")
    env = vs.anchor_env()
    servers = {"pbserve": args.pbserve.split()}
    if args.b:
        servers["b"] = args.b.split()
    else:
        servers["triton"] = vs.TRITON_CMD
    rows = [r for r in vs.ROWS if r[2] != "big" and re.search(args.rows, r[0] + " " + r[1])]
    print(f"{'row':<28} {'server':<16} {'infer/s':>8} {'CPU us':>7} {'syscalls':>8} "
          f"{'ctx sw':>7}   (per request, server's process tree)")
    with tempfile.TemporaryDirectory(prefix="pbserve-per-request-") as tmp:
        for row in rows:
            key, label, _, proto, elems, conc, extra, model = row
            model = model or "identity_fp32"
            for name in servers:
                repo = os.path.join(args.perf_dir, "anchor_models")
                srv = vs.Server("a", name, servers[name], repo, vs.free_ports(3), tmp,
                                tag=f"_{key}")
                srv.start()
                try:
                    srv.wait_ready(60, model)
                    vs.warm_up(srv, "identity_fp32")
                    url = f"127.0.0.1:{srv.grpc if proto == 'grpc' else srv.http}"
                    load = subprocess.Popen(
                        [pa, "-m", model, "-i", proto, "-u", url, "--shape", f"INPUT0:{elems}",
                         "--concurrency-range", str(conc), "--measurement-interval",
                         str(int((args.seconds + 6) * 1000)), "--max-trials", "2"] + extra,
                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                        start_new_session=True)
                    try:
                        time.sleep(2.0)
                        pids = tree_pids(srv.pid)
                        n0 = completed(srv.http, model)
                        # one perf a process only where its lines are asked for
                        each = perf_stat_each(pids, args.seconds) if args.by_process \
                            else {srv.pid: perf_stat(pids, args.seconds)}
                        n1 = completed(srv.http, model)
                    finally:
                        load.send_signal(2)
                        load.wait(timeout=30)
                    n = max(n1 - n0, 1)
                    tree = {event: sum(c.get(event, 0) for c in each.values())
                            for event in EVENTS}
                    _print(label, name, n / args.seconds, tree, n)
                    for pid, counts in each.items() if args.by_process else ():
                        if counts.get("task-clock", 0) >= 1:  # ran a ms or more
                            _print("", f"  {process_kind(pid, srv.pid)} {pid}", None,
                                   counts, n)
                finally:
                    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
