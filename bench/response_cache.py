"""The response cache: a repeated request answered from the cache (hit) against one
that misses (lookup, the model's run, insertion), for 64 B and 1 MiB FP32 identity
requests, on pbserve and on the real Triton 2.51 with its own `local` cache, in one run.

    python bench/response_cache.py [--seconds 2] [--rounds 3]

Load: perf_analyzer (Triton's own, from ../shared/perf: `bash
../shared/perf/setup_anchor.sh`) over gRPC at concurrency 1, its requests cycling
through a few distinct inputs (`--input-data`, base64):
- hit: 2 inputs, a cache that holds both: every request after the first two is a hit;
- miss: more inputs than the cache holds (64 B: 32 inputs, a 1 KiB cache, at most ~6
  entries under either server's accounting; 1 MiB: 3 inputs, a 2.5 MiB cache): LRU
  evicts each before it comes round again, so every request misses.
Every row runs on a fresh server; the servers take turns, `--rounds` times, and each
ratio is the median over the rounds. Prints figures and ratios; asserts nothing. The
cache's counters (statistics extension) are checked after each row to say the hits
and misses were what the row meant.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import json
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Iterator

import numpy as np

from pbserve.testing import running_server
from triton_anchor import anchor_env, running_triton

MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
'''
CONFIG = '''name: "cached"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
response_cache { enable: true }
'''
# row -> (elements, distinct inputs, cache bytes)
ROWS = {
    "64 B hit": (16, 2, 1 << 20),
    "64 B miss": (16, 32, 1024),
    "1 MiB hit": (1 << 18, 2, 4 << 20),
    "1 MiB miss": (1 << 18, 3, 5 << 19),
}


def input_data(path: Path, elements: int, distinct: int) -> None:
    """perf_analyzer's --input-data: `distinct` different FP32 inputs, base64."""
    rng = np.random.default_rng(7)
    data = [{"INPUT0": {"b64": base64.b64encode(
        rng.standard_normal(elements, dtype=np.float32).tobytes()).decode()}}
        for _ in range(distinct)]
    path.write_text(json.dumps({"data": data}))


def perf_analyzer(env: dict, url: str, elements: int, data: Path, seconds: float,
                  workdir: Path) -> tuple[float, float]:
    """Inferences/s and p50 (us) from perf_analyzer over gRPC at concurrency 1."""
    out = workdir / "pa.csv"
    argv = [env["PERF_ANALYZER"], "-m", "cached", "-i", "grpc", "-u", url,
            "--shape", f"INPUT0:{elements}", "--input-data", str(data),
            "--concurrency-range", "1", "--measurement-interval", str(int(seconds * 1000)),
            "--stability-percentage", "100", "--max-trials", "10", "-f", str(out)]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or not out.exists():
        raise RuntimeError(f"perf_analyzer failed ({r.returncode}):\n{r.stdout[-2000:]}"
                           f"{r.stderr[-2000:]}")
    row = list(csv.DictReader(out.open()))[-1]
    return float(row["Inferences/Second"]), float(row["p50 latency"])


@contextlib.contextmanager
def server(name: str, repo: Path, env: dict, cache_bytes: int) -> Iterator[tuple[str, str]]:
    """(gRPC url, HTTP url) of a fresh pbserve or tritonserver with a local cache."""
    if name == "pbserve":
        with running_server(repo, args=["--cache-config", f"local,size={cache_bytes}",
                                         "--log-info", "false"],
                            ready_timeout=60) as pb:
            yield pb.grpc_url, pb.http_url
        return
    with running_triton(repo, env, ["--cache-directory", env["TRITON_DIST"] + "/caches",
                                    "--cache-config", f"local,size={cache_bytes}"],
                        ready_timeout=90) as urls:
        yield urls


def cache_counts(http_url: str) -> tuple[int, int]:
    """(hits, misses) of the model, from the statistics extension."""
    with urllib.request.urlopen(f"http://{http_url}/v2/models/cached/stats") as r:
        stats = json.load(r)["model_stats"][0]["inference_stats"]
    return stats["cache_hit"]["count"], stats["cache_miss"]["count"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="perf_analyzer's window")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", default="", help="only the rows whose name has this "
                    "(e.g. '64 B')")
    args = ap.parse_args()
    rows = {row: spec for row, spec in ROWS.items() if args.rows in row}
    env = anchor_env(("PERF_ANALYZER", "TRITON_BIN"))
    if env is None:
        raise SystemExit("perf_analyzer / tritonserver not found: bash "
                         "../shared/perf/setup_anchor.sh")
    with tempfile.TemporaryDirectory(prefix="pbserve-bench-cache-") as tmp:
        work = Path(tmp)
        repo = work / "repo"
        (repo / "cached" / "1").mkdir(parents=True)
        (repo / "cached" / "1" / "model.py").write_text(MODEL)
        (repo / "cached" / "config.pbtxt").write_text(CONFIG)
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for row, (elements, distinct, cache_bytes) in rows.items():
            data = work / f"{elements}-{distinct}.json"
            input_data(data, elements, distinct)
            for _ in range(args.rounds):
                for name in ("pbserve", "triton"):
                    with server(name, repo, env, cache_bytes) as (grpc_url, http_url):
                        result = perf_analyzer(env, grpc_url, elements, data, args.seconds,
                                               work)
                        hits, misses = cache_counts(http_url)
                    meant = "hit" if row.endswith("hit") else "miss"
                    if (meant == "hit" and misses > distinct) or (
                            meant == "miss" and hits > 0):
                        print(f"  note: {name} {row}: {hits} hits, {misses} misses")
                    figures.setdefault((row, name), []).append(result)
        print(f"\nconcurrency 1, gRPC, perf_analyzer {args.seconds:g} s windows, "
              f"{args.rounds} rounds (medians)")
        print(f"{'row':<12} {'pbserve inf/s':>14} {'p50 us':>8} {'Triton inf/s':>13} "
              f"{'p50 us':>8} {'pbserve/Triton':>15}")
        for row in rows:
            ours, theirs = figures[(row, "pbserve")], figures[(row, "triton")]
            ratio = float(np.median([a[0] / b[0] for a, b in zip(ours, theirs)]))
            print(f"{row:<12} {np.median([f[0] for f in ours]):>14.0f} "
                  f"{np.median([f[1] for f in ours]):>8.0f} "
                  f"{np.median([f[0] for f in theirs]):>13.0f} "
                  f"{np.median([f[1] for f in theirs]):>8.0f} {ratio:>14.2f}x")
        for size in sorted({row.rsplit(" ", 1)[0] for row in rows}):
            for name in ("pbserve", "triton"):
                if (f"{size} hit", name) not in figures or (f"{size} miss", name) not in \
                        figures:
                    continue
                hit = np.median([f[0] for f in figures[(f"{size} hit", name)]])
                miss = np.median([f[0] for f in figures[(f"{size} miss", name)]])
                print(f"{size} {name}: hit / miss throughput {hit / miss:.2f}x")


if __name__ == "__main__":
    main()
