"""pbserve's gRPC frontend against the bare grpcio asyncio echo, in one run.

    flock -x /tmp/pbserve-cpu.lock python bench/grpc_frontend.py [--rounds 2]
        [--old /work/main/.venv/bin/python]   # a second pbserve (another checkout's venv)
        [--variants]                          # + reply spin off, gc.freeze off, at c=1, c=8
        [--pyspy DIR]                         # + py-spy --native profiles of the parent

Per round, for 64 B at c=1 and c=8 and 16 MiB at c=1, perf_analyzer (the anchor build,
../shared/perf/env_anchor.sh) drives a fresh server of each kind back to back: the echo
(`grpc_echo/serve.py grpcio-aio`), pbserve from this checkout, and `--old`'s pbserve.
Prints throughput, p50 and the CPU each server process spent per inference (parent and
stubs apart). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from grpc_transports import anchor_env, free_port  # noqa: E402
from proc_cpu import children_cpu  # noqa: E402

REPO = "/work/shared/perf/anchor_models"
ROWS = [(1, 16, 1500), (8, 16, 1500), (1, 4194304, 2000)]  # concurrency, elements, window


def server_argv(python: str, spin0: bool = False, nofreeze: bool = False) -> list[str]:
    """pbserve's command line; `measure` puts the port for PORT."""
    pre = "import pbserve.backend.instances.hop as h; h.REPLY_WATCH_NS = 0; " if spin0 else ""
    pre += "import gc; gc.freeze = lambda: None; " if nofreeze else ""
    return [python, "-c", pre + "import sys; from pbserve.cli import main; sys.exit(main())",
            "--model-repository", REPO, "--grpc-address", "127.0.0.1", "--grpc-port",
            "PORT", "--allow-http", "false", "--allow-metrics", "false"]


def measure(label: str, argv: list[str], concurrency: int, elements: int, window: int,
            pyspy: str | None = None) -> str:
    import tritonclient.grpc as grpcclient

    port = free_port()
    argv = [a.replace("PORT", str(port)) for a in argv]
    proc = subprocess.Popen(argv, start_new_session=True, cwd="/tmp",
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        for _ in range(300):
            try:
                if client.is_model_ready("identity_fp32"):
                    break
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.2)
        env = anchor_env()
        spy = None
        if pyspy:
            spy = subprocess.Popen(["py-spy", "record", "--native", "--threads", "-r", "500",
                                    "-d", "12", "-f", "raw", "-p", str(proc.pid), "-o", pyspy],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        csv_path = "/tmp/grpc_frontend_pa.csv"
        cpu0, t0 = children_cpu(proc.pid), time.monotonic()
        r = subprocess.run([env["PERF_ANALYZER"], "-m", "identity_fp32", "-i", "grpc",
                            "-u", f"127.0.0.1:{port}", "--shape", f"INPUT0:{elements}",
                            "--concurrency-range", str(concurrency), "--measurement-interval",
                            str(window), "--stability-percentage", "20", "--max-trials", "6",
                            "-f", csv_path], env=env, capture_output=True, text=True,
                           cwd="/tmp")
        cpu1, wall = children_cpu(proc.pid), time.monotonic() - t0
        if spy:
            spy.wait()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
    if r.returncode != 0:
        return f"{label}: perf_analyzer rc={r.returncode}"
    with open(csv_path, newline="") as f:
        last = list(csv.DictReader(f))[-1]
    thr = float(last["Inferences/Second"])
    n = thr * wall
    spent = {pid: (cpu1[pid] - cpu0.get(pid, 0)) / n * 1e6 for pid in cpu1}
    parts = " ".join(f"{'parent' if pid == proc.pid else 'stub'}:{us:.0f}"
                     for pid, us in spent.items() if us >= 1)
    return (f"{label:12} c={concurrency} {elements * 4:>8} B  {thr:8.1f} infer/s  "
            f"p50 {last['p50 latency']:>7} us  cpu us/infer {parts}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old", help="python of another checkout's venv, run as 'old'")
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--pyspy", help="a folder for py-spy's raw profiles")
    args = ap.parse_args()
    echo = [sys.executable, str(HERE / "grpc_echo" / "serve.py"), "grpcio-aio", "PORT"]
    kinds = [("echo", echo), ("pbserve", server_argv(sys.executable))]
    if args.old:
        kinds.append(("pbserve-old", server_argv(args.old)))
    for _ in range(args.rounds):
        for row in ROWS:
            for label, argv in kinds:
                print(measure(label, argv, *row), flush=True)
    if args.variants:
        for concurrency, elements, window in ROWS[:2]:
            for label, spin0, nofreeze in (("spin-off", True, False),
                                           ("freeze-off", False, True)):
                argv = server_argv(sys.executable, spin0, nofreeze)
                print(measure(label, argv, concurrency, elements, window), flush=True)
    if args.pyspy:
        os.makedirs(args.pyspy, exist_ok=True)
        for concurrency, elements, window in ROWS:
            argv = server_argv(sys.executable)
            out = os.path.join(args.pyspy, f"c{concurrency}-{elements * 4}.txt")
            print(measure("py-spy", argv, concurrency, elements, 4000, out), flush=True)


if __name__ == "__main__":
    main()
