"""An ONNX model served by pbserve (built-in ONNX Runtime backend, in a stub) under
perf_analyzer over gRPC at concurrency 1 and 8, against `InferenceSession.run` on the
same graph in a tight loop in one process (the floor: no server, no IPC).

The model: FP32 [batch, 256] through `--layers` Gemm+Relu layers of 256x256
(max_batch_size 8, dynamic batching, one instance, intra_op_thread_count 1; the direct
session gets one intra-op thread too). perf_analyzer comes from ../shared/perf
(`bash ../shared/perf/setup_anchor.sh` puts it in /tmp/anchor-venv); without it only the
direct figures are printed.

    python bench/onnx_serving.py [--layers 4] [--seconds 2]

Prints figures; asserts nothing. One batch-1 request per call at c=1; at c=8 the dynamic
batcher may put several requests in one session.run, and the direct loop is then also
measured at batch 8 per run.

`--triton`: the same graph on the real Triton 2.51 in the same run, wrapped in a plain
Python model (its anchor wheel has only the Python backend): `model.py` runs the graph
with onnxruntime, which must be installed in the anchor venv
(`/tmp/anchor-venv/bin/pip install 'onnxruntime<1.21'`, for its numpy 1.26). The two
servers take turns, `--rounds` times, and the ratio per row is the median of the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from pbserve.testing import running_server
from triton_anchor import anchor_env, running_triton

WIDTH = 256
CONFIG = """platform: "onnxruntime_onnx"
max_batch_size: 8
dynamic_batching { }
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
"""


# The graph in a plain Python model, for Triton's Python backend (--triton).
WRAPPED_CONFIG = """backend: "python"
max_batch_size: 8
dynamic_batching { }
input [ { name: "X" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 256 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
WRAPPED_MODEL = '''
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        path = os.path.join(os.path.dirname(__file__), "model.onnx")
        self.session = ort.InferenceSession(path, options,
                                            providers=["CPUExecutionProvider"])

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        ys = self.session.run(["Y"], {"X": np.concatenate(xs)})[0]
        out, start = [], 0
        for x in xs:
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", ys[start:start + len(x)])]))
            start += len(x)
        return out
'''


def write_model(path: Path, layers: int) -> None:
    rng = np.random.default_rng(0)
    nodes, inits, name = [], [], "X"
    for i in range(layers):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        b = np.zeros(WIDTH, np.float32)
        inits += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(b, f"B{i}")]
        out = "Y" if i == layers - 1 else f"H{i}"
        nodes.append(helper.make_node("Gemm", [name, f"W{i}", f"B{i}"], [f"G{i}"]))
        nodes.append(helper.make_node("Relu", [f"G{i}"], [out]))
        name = out
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", WIDTH])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", WIDTH])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def direct(path: Path, batch: int, seconds: float) -> tuple[float, float]:
    """Inferences/s and the median microseconds of one run, in this process."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((batch, WIDTH)).astype(np.float32)
    for _ in range(200):
        session.run(["Y"], {"X": x})
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter_ns()
        session.run(["Y"], {"X": x})
        times.append(time.perf_counter_ns() - t0)
    total_s = sum(times) / 1e9
    return len(times) * batch / total_s, float(np.median(times)) / 1e3


def perf_analyzer(env: dict, url: str, concurrency: int, seconds: float,
                  workdir: Path) -> tuple[float, float]:
    """Inferences/s and p50 (us) from perf_analyzer over gRPC."""
    out = workdir / f"c{concurrency}.csv"
    argv = [env["PERF_ANALYZER"], "-m", "mlp", "-i", "grpc", "-u", url,
            "--concurrency-range", str(concurrency),
            "--measurement-interval", str(int(seconds * 1000)), "--stability-percentage", "20",
            "--max-trials", "8", "-f", str(out)]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or not out.exists():
        raise RuntimeError(f"perf_analyzer failed ({r.returncode}):\n{r.stdout[-2000:]}"
                           f"{r.stderr[-2000:]}")
    row = list(csv.DictReader(out.open()))[-1]
    return float(row["Inferences/Second"]), float(row["p50 latency"])


def triton_rows(env: dict, repo: Path, seconds: float, rounds: int, workdir: Path
                ) -> list[tuple[str, float, float]]:
    """pbserve (built-in backend) and Triton (the graph in a Python model) taking turns
    under perf_analyzer; per concurrency the median ratio of the rounds."""
    wrapped = workdir / "wrapped"
    (wrapped / "mlp" / "1").mkdir(parents=True)
    (wrapped / "mlp" / "1" / "model.onnx").write_bytes(
        (repo / "mlp" / "1" / "model.onnx").read_bytes())
    (wrapped / "mlp" / "1" / "model.py").write_text(WRAPPED_MODEL)
    (wrapped / "mlp" / "config.pbtxt").write_text(WRAPPED_CONFIG)
    figures: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for name in ("pbserve", "triton"):
            with _server(name, repo if name == "pbserve" else wrapped, env) as url:
                for concurrency in (1, 8):
                    try:
                        figures.setdefault((name, concurrency), []).append(
                            perf_analyzer(env, url, concurrency, seconds, workdir))
                    except RuntimeError as err:
                        print(f"{name} c={concurrency}: {err}")
    rows = []
    for concurrency in (1, 8):
        ours, theirs = figures.get(("pbserve", concurrency)), figures.get(
            ("triton", concurrency))
        if not ours or not theirs:
            continue
        ratios = sorted(a[0] / b[0] for a, b in zip(ours, theirs))
        median = ratios[len(ratios) // 2]
        rows.append((f"Triton 2.51, graph in a Python model, c={concurrency}",
                     float(np.median([f[0] for f in theirs])),
                     float(np.median([f[1] for f in theirs]))))
        print(f"c={concurrency}: pbserve / Triton throughput per round "
              f"{', '.join(f'{r:.2f}' for r in ratios)}: median {median:.2f}x")
    return rows


@contextlib.contextmanager
def _server(name: str, repo: Path, env: dict) -> Iterator[str]:
    """A running server's gRPC url: pbserve, or the real tritonserver."""
    if name == "pbserve":
        with running_server(repo, ready_timeout=60) as server:
            yield server.grpc_url
        return
    with running_triton(repo, env) as (grpc_url, _):
        yield grpc_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="the direct loop's time, and perf_analyzer's window")
    parser.add_argument("--triton", action="store_true",
                        help="also the real Triton, the graph in a Python model")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each server")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        write_model(repo / "mlp" / "1" / "model.onnx", args.layers)
        (repo / "mlp" / "config.pbtxt").write_text(CONFIG)
        path = repo / "mlp" / "1" / "model.onnx"
        print(f"ONNX MLP: {args.layers} x (Gemm {WIDTH}x{WIDTH} + Relu), FP32, batch 1 per "
              "request; onnxruntime", ort.__version__)
        rows = []
        for batch in (1, 8):
            rate, median = direct(path, batch, args.seconds)
            rows.append((f"InferenceSession.run, batch {batch}, one process", rate, median))
        env = anchor_env()
        if env is None:
            print("perf_analyzer not found (bash ../shared/perf/setup_anchor.sh): "
                  "direct figures only")
        else:
            if args.triton:
                rows += triton_rows(env, repo, args.seconds, args.rounds, Path(tmp))
            with running_server(repo, ready_timeout=60) as server:
                for concurrency in (1, 8):
                    try:
                        rate, p50 = perf_analyzer(env, server.grpc_url, concurrency,
                                                  args.seconds, Path(tmp))
                    except RuntimeError as err:  # e.g. no stable window on a busy machine
                        print(f"c={concurrency}: {err}")
                        continue
                    rows.append((f"pbserve gRPC, perf_analyzer c={concurrency}", rate, p50))
        base = rows[0][1]
        print(f"{'':48} {'infer/s':>10} {'p50/median us':>14} {'vs direct b1':>13}")
        for label, rate, latency in rows:
            print(f"{label:48} {rate:10.0f} {latency:14.1f} {rate / base:12.2f}x")


if __name__ == "__main__":
    main()
