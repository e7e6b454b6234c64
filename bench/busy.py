"""vs.py's 64 B rows on pbserve and the real Triton while another model in the same
server computes (issue 26, "on a busy machine").

In production the other load on a server's CPUs is mostly its other models' compute.
Here a second model, `busy_fp32` (a Python model that spins 10 ms of CPU per request,
the same model.py on both servers), is driven by its own client at concurrency 1 while
perf_analyzer measures `identity_fp32` on the same server. The two servers take turns,
one running at a time, `--pairs` times (odd pairs pbserve first), each freshly started;
every row is a perf_analyzer 2.48 run as in `../shared/perf/vs.py` (whose helpers this
imports: the same server commands, flags, windows and CSV parsing).

    python bench/busy.py [--pairs 3] [--rows 64B]

Prints per pair and row the throughput, p50 and the busy model's own rate (a server
that starved the busy model would gain unfairly: its rate is printed beside), then the
medians over pairs and the per-pair ratio pbserve / Triton. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUSY_MS = 10

BUSY_MODEL = textwrap.dedent(f'''\
    import time

    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        """Spins {BUSY_MS} ms of CPU per request, then returns INPUT0."""

        def execute(self, requests):
            responses = []
            for request in requests:
                end = time.thread_time() + {BUSY_MS / 1000}
                while time.thread_time() < end:
                    pass
                x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
            return responses
''')

BUSY_DRIVER = textwrap.dedent('''\
    import json, signal, sys, time, urllib.request
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    print("started", flush=True)
    url = f"http://127.0.0.1:{sys.argv[1]}/v2/models/busy_fp32/infer"
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [16], "datatype": "FP32",
                                   "data": [0.0] * 16}]}).encode()
    done = 0
    t0 = time.monotonic()
    while not stop:
        req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        done += 1
    print(f"{done} {time.monotonic() - t0:.3f}", flush=True)
''')


def make_repo(anchor: Path, into: Path) -> Path:
    """anchor_models' identity_fp32 and the busy model, side by side."""
    repo = into / "repo"
    shutil.copytree(anchor / "identity_fp32", repo / "identity_fp32")
    busy = repo / "busy_fp32"
    (busy / "1").mkdir(parents=True)
    config = (anchor / "identity_fp32" / "config.pbtxt").read_text()
    (busy / "config.pbtxt").write_text(config.replace('"identity_fp32"', '"busy_fp32"'))
    (busy / "1" / "model.py").write_text(BUSY_MODEL)
    return repo


class Driver:
    """The busy model's client (a process of its own, at concurrency 1)."""

    def __init__(self, http_port: int, script: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, str(script), str(http_port)],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.pid = self.proc.pid
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "started": SIGINT is handled from here on

    def stop(self) -> float:
        """Requests per second it got answered."""
        self.proc.send_signal(2)
        out, _ = self.proc.communicate(timeout=30)
        done, seconds = out.split()
        return int(done) / float(seconds) if float(seconds) > 0 else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--perf-dir", default=str(HERE.parent.parent / "shared" / "perf"),
                    help="the directory of vs.py and anchor_models")
    ap.add_argument("--pbserve", default="pbserve", help="pbserve's command")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--rows", default="64B", help="regex on vs.py's row keys")
    ap.add_argument("--interval", type=int, default=1500, help="ms per perf_analyzer window")
    ap.add_argument("--trials", type=int, default=10, help="perf_analyzer's --max-trials")
    args = ap.parse_args()

    sys.path.insert(0, args.perf_dir)
    import vs  # ../shared/perf/vs.py

    pa = os.path.join(os.environ.get("ANCHOR_VENV", "/tmp/anchor-venv"), "bin", "perf_analyzer")
    if not os.access(pa, os.X_OK):
        print(f"no perf_analyzer at {pa}: run bash {args.perf_dir}/setup_anchor.sh",
              file=sys.stderr)
        return 2
    rows = [r for r in vs.ROWS if r[2] == "small" and re.search(args.rows, r[0] + " " + r[1])]
    pa_args = argparse.Namespace(
        model="identity_fp32", interval_small=args.interval, stability_small=20,
        trials_small=args.trials, pa_timeout=90)
    env = vs.anchor_env()
    servers = {"pbserve": args.pbserve.split(), "triton": vs.TRITON_CMD}
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="pbserve-busy-") as tmp:
        tmpdir = Path(tmp)
        repo = make_repo(Path(args.perf_dir) / "anchor_models", tmpdir)
        driver_script = tmpdir / "driver.py"
        driver_script.write_text(BUSY_DRIVER)
        for pair in range(1, args.pairs + 1):
            order = ["pbserve", "triton"] if pair % 2 else ["triton", "pbserve"]
            for name in order:
                srv = vs.Server("a" if name == "pbserve" else "b", name, servers[name],
                                str(repo), vs.free_ports(3), tmp, tag=f"_{pair}")
                srv.start()
                try:
                    ready = srv.wait_ready(60, "busy_fp32")
                    problem = vs.warm_up(srv, "identity_fp32")
                    if problem:
                        print(f"pair {pair} {name}: warm-up failed: {problem}")
                    for row in rows:
                        driver = Driver(srv.http, driver_script)
                        time.sleep(1.0)
                        res = vs.run_pa(pa, env, srv, driver, row, pa_args, tmp,
                                        f"{name}_{pair}_{row[0]}")
                        busy_rate = driver.stop()
                        if not res.ok:
                            print(f"{pair:>3} {row[1]:<26} {name:<8} FAILED: {res.error}")
                            continue
                        results.setdefault((row[0], name), []).append(
                            (res.thr, res.p50, busy_rate))
                        print(f"{pair:>3} {row[1]:<26} {name:<8} {res.thr:9.1f} infer/s "
                              f"p50 {res.p50:7.0f} us  busy model {busy_rate:5.1f}/s "
                              f"(ready in {ready:.1f} s)", flush=True)
                finally:
                    srv.stop()

    print()
    print(f"{'row':<26} {'pbserve':>9} {'triton':>9} {'ratio':>6} {'range':>11} "
          f"{'p50 pb':>7} {'p50 tr':>7} {'p50 r':>6} {'busy/s pb':>9} {'busy/s tr':>9}")
    for row in rows:
        a, b = results.get((row[0], "pbserve"), []), results.get((row[0], "triton"), [])
        n = min(len(a), len(b))
        if not n:
            print(f"{row[1]:<26} (no result)")
            continue
        ratios = [a[i][0] / b[i][0] for i in range(n)]
        p50r = [a[i][1] / b[i][1] for i in range(n)]

        def med(values: list[tuple[float, float, float]], k: int) -> float:
            return statistics.median(v[k] for v in values)
        print(f"{row[1]:<26} {med(a, 0):9.1f} {med(b, 0):9.1f} {statistics.median(ratios):6.2f} "
              f"{min(ratios):5.2f}-{max(ratios):<5.2f} {med(a, 1):7.0f} {med(b, 1):7.0f} "
              f"{statistics.median(p50r):6.2f} {med(a, 2):9.1f} {med(b, 2):9.1f}")
    print(f"\nbusy model: {BUSY_MS} ms of CPU a request at concurrency 1 on the same server; "
          "ratio = median over pairs of pbserve / Triton; p50 in us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
