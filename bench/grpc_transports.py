"""Which HTTP/2 transport serves Triton's gRPC API fastest here? Bare echoes, one run.

    flock -x /tmp/pbserve-cpu.lock python bench/grpc_transports.py [--rounds 3]
        [--transports grpcio-aio,zttp,...] [--rows 64B|16MiB|...]
    ... --transports grpcio-aio,zttp,pbserve,pbserve-grpcio   # + pbserve, on the anchor models

(the h2, grpclib, hypercorn, uvicorn, pyvoy and granian echoes of the first comparison,
docs/performance.md, are in git history at 70c8ac7)

Each transport in `bench/grpc_echo/` answers the same RPCs with the same bytes (no model,
no stub: INPUT0's raw bytes back as OUTPUT0). perf_analyzer (the anchor build,
../shared/perf/env_anchor.sh) drives each one for 64 B (16 FP32) at concurrency 1 and 8
and 16 MiB (4194304 FP32) at concurrency 1. Within a round every row is run on every
transport back to back, in an order rotated each round, on a fresh server each time.
Prints each measurement, then per row the median throughput, p50 and the server's CPU
per inference, and each transport's ratio to the grpcio asyncio echo (median of the
per-round ratios). Nothing is asserted.

A transport that fails tritonclient's smoke check (`grpc_echo/smoke.py`: metadata,
config, 64 B and 16 MiB infers, a stream) is reported and left out.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from proc_cpu import tree_cpu_s

HERE = Path(__file__).resolve().parent
ENV_ANCHOR = Path("/work/shared/perf/env_anchor.sh")
ANCHOR_MODELS = ENV_ANCHOR.with_name("anchor_models")  # the pbserve transports' ($PBSERVE_REPO)
BASELINE = "grpcio-aio"
TRANSPORTS = ["grpcio-aio", "grpcio-sync", "zttp"]
SMALL, BIG = 16, 4194304
# key, elements, concurrency, window ms, max trials
ROWS = [("64B c=1", SMALL, 1, 1500, 6), ("64B c=8", SMALL, 8, 1500, 6),
        ("16MiB c=1", BIG, 1, 2000, 10)]


def anchor_env() -> dict[str, str]:
    """perf_analyzer's environment (its libraries), as env_anchor.sh sets it."""
    out = subprocess.run(["bash", "-c", f"source {shlex.quote(str(ENV_ANCHOR))} && env -0"],
                         capture_output=True, check=True).stdout
    return dict(item.decode().split("=", 1) for item in out.split(b"\0") if b"=" in item)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Echo:
    """One echo server process (`grpc_echo/serve.py`), stopped on exit."""

    def __init__(self, transport: str, logdir: str) -> None:
        self.transport = transport
        self.port = free_port()
        self._log = open(os.path.join(logdir, f"{transport}.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "grpc_echo" / "serve.py"), transport, str(self.port)],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            env={"PBSERVE_REPO": str(ANCHOR_MODELS), **os.environ})

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the port accepts connections (whether it speaks gRPC is smoke's job)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.transport} exited ({self.proc.returncode})")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.transport} not listening after {timeout} s"
                                       ) from None
                time.sleep(0.1)

    def wait_model_ready(self, timeout: float = 60.0) -> None:
        """Until ModelReady says so (a pbserve-* server loads the model after listening)."""
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.port}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if client.is_model_ready("identity_fp32"):
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.transport}: the model is not ready after {timeout} s")

    def __enter__(self) -> Echo:
        return self

    def __exit__(self, *_exc: object) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
        self._log.close()


def smoke(transport: str, logdir: str) -> str:
    """'' when tritonclient gets through `smoke.py` against the echo, else the failure."""
    try:
        with Echo(transport, logdir) as echo:
            echo.wait_ready()
            r = subprocess.run([sys.executable, str(HERE / "grpc_echo" / "smoke.py"),
                                str(echo.port)], capture_output=True, text=True, timeout=120)
            if r.returncode == 0:
                return ""
            lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
            return lines[-1] if lines else f"rc={r.returncode}"
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return str(exc)


def measure(pa: str, env: dict[str, str], transport: str, row: tuple, logdir: str
            ) -> dict[str, float] | str:
    """One perf_analyzer run on a fresh echo: throughput, p50 (us), server CPU/infer (us)."""
    _, elements, concurrency, window, trials = row
    with Echo(transport, logdir) as echo:
        echo.wait_ready()
        echo.wait_model_ready()
        csv_path = os.path.join(logdir, "pa.csv")
        if os.path.exists(csv_path):
            os.unlink(csv_path)
        argv = [pa, "-m", "identity_fp32", "-i", "grpc", "-u", f"127.0.0.1:{echo.port}",
                "--shape", f"INPUT0:{elements}", "--concurrency-range", str(concurrency),
                "--measurement-interval", str(window), "--stability-percentage", "20",
                "--max-trials", str(trials), "-f", csv_path]
        cpu0, t0 = tree_cpu_s(echo.proc.pid), time.monotonic()
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180,
                           cwd=logdir)
        cpu, wall = tree_cpu_s(echo.proc.pid) - cpu0, time.monotonic() - t0
    if r.returncode != 0 or not os.path.exists(csv_path):
        with open(os.path.join(logdir, f"{transport}.pa.txt"), "a") as f:
            f.write(r.stdout + r.stderr)
        lines = [ln for ln in r.stdout.splitlines() if re.search(r"rror|ailed", ln)]
        return (lines[-1] if lines else f"perf_analyzer rc={r.returncode}").strip()
    with open(csv_path, newline="") as f:
        last = list(csv.DictReader(f))[-1]
    thr = float(last["Inferences/Second"])
    # CPU over the whole perf_analyzer run (its warm-up and every window) per inference
    # at the measured rate: an estimate, comparable between transports.
    return {"thr": thr, "p50": float(last["p50 latency"]),
            "cpu_us": cpu / max(thr * wall, 1.0) * 1e6}


def machine_busy() -> float:
    """Fraction of both CPUs busy over the next second."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]
    t0, i0 = sample()
    time.sleep(1)
    t1, i1 = sample()
    return 1 - (i1 - i0) / max(t1 - t0, 1)


Results = dict[tuple[str, str], list["dict[str, float] | None"]]  # (row, transport) -> rounds


def report(rows: list[tuple], transports: list[str], results: Results, baseline: str) -> None:
    print("\n| row | transport | infer/s (median) | p50 us | server CPU us/infer | "
          f"ratio to {baseline} (rounds' range) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        key = row[0]
        base = results.get((key, baseline), [])
        for t in transports:
            rounds = results.get((key, t), [])
            runs = [r for r in rounds if r]
            if not runs:
                print(f"| {key} | {t} | failed | | | |")
                continue
            thr = statistics.median(r["thr"] for r in runs)
            p50 = statistics.median(r["p50"] for r in runs)
            cpu = statistics.median(r["cpu_us"] for r in runs)
            ratios = [r["thr"] / b["thr"] for r, b in zip(rounds, base) if r and b]
            ratio = (f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
                     if ratios else "-")
            fmt = f"{thr:,.1f}" if thr < 100 else f"{thr:,.0f}"
            print(f"| {key} | {t} | {fmt} | {p50:,.0f} | {cpu:,.0f} | {ratio} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transports", default=",".join(TRANSPORTS))
    ap.add_argument("--rows", default=".", help="regex on the row names")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default=BASELINE, help="the transport ratios are taken to")
    ap.add_argument("--no-smoke", action="store_true",
                    help="skip the smoke check")
    args = ap.parse_args()
    transports = args.transports.split(",")
    if args.baseline not in transports:
        transports.insert(0, args.baseline)
    rows = [r for r in ROWS if re.search(args.rows, r[0])]
    env = anchor_env()
    pa = env["PERF_ANALYZER"]
    logdir = tempfile.mkdtemp(prefix="grpc-transports-")
    busy = machine_busy()
    for _ in range(60):  # other sessions' work winding down
        if busy < 0.2:
            break
        busy = machine_busy()
    print(f"logs in {logdir}; machine busy {busy:.0%} before the run")

    for t in [] if args.no_smoke else list(transports):
        failure = smoke(t, logdir)
        if failure:
            print(f"{t}: left out, fails tritonclient's smoke check: {failure}")
            transports.remove(t)
    results: Results = {}
    for rnd in range(args.rounds):
        for row in rows:
            k = rnd % len(transports)
            for t in transports[k:] + transports[:k]:
                got = measure(pa, env, t, row, logdir)
                if isinstance(got, str):
                    print(f"round {rnd + 1} {row[0]} {t}: {got}", flush=True)
                    got = None
                else:
                    print(f"round {rnd + 1} {row[0]:9} {t:13} {got['thr']:9.1f} infer/s  "
                          f"p50 {got['p50']:9.0f} us  server {got['cpu_us']:7.0f} us/infer",
                          flush=True)
                results.setdefault((row[0], t), []).append(got)
    report(rows, transports, results, args.baseline)


if __name__ == "__main__":
    main()
