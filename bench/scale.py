"""Many models on one machine: pbserve against the real Triton 2.51 at N models.

    python bench/scale.py                      # 16 and 64 models, pbserve then Triton
    python bench/scale.py --models 64 --servers pbserve,triton
    python bench/scale.py --pbserve-args="--stub-zygote false"   # the plain stub start
    python bench/scale.py --backend torch --servers pbserve,pbserve-plain   # TorchScript

N copies of `identity_fp32` (../shared/perf/anchor_models; one CPU instance each) under
new names in a scratch repository; each server started in turn on it. `--backend onnx` or
`torch`: N identity models of pbserve's built-in ONNX Runtime or TorchScript backend
instead (Triton's wheel here has only the Python backend: compare `pbserve` with
`pbserve-plain`, the stubs started without a zygote, `--stub-zygote false`). For each it
prints: the time from start to `/v2/health/ready` answering 200, the processes of its
tree, their PSS and RSS summed from /proc/PID/smaps_rollup (SETTLE_S after ready), the
CPU the tree used over IDLE_S of idleness (% of one core), and the latency of the first
request each model serves (one HTTP/JSON request at a time over one connection: the
median and the slowest over the N models). Then pbserve's figures over Triton's.

The real Triton comes from ../shared/perf/setup_anchor.sh (/tmp/anchor-venv). Figures on
a shared machine drift; ratios from one run do not drift as much.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proc_cpu import tree_cpu_s  # noqa: E402

from pbserve.testing import free_ports  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT.parent / "shared" / "perf"
ANCHOR_MODEL = PERF / "anchor_models" / "identity_fp32"
TRITON_CMD = ["bash", "-c", f"source {shlex.quote(str(PERF))}/env_anchor.sh && "
              'exec "$TRITON_BIN" --backend-directory="$TRITON_BACKENDS" "$@"', "tritonserver"]
SETTLE_S = 3.0
READY_TIMEOUT_S = 600.0
BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [16], "datatype": "FP32",
                               "data": [1.0] * 16}]}).encode()


@dataclass
class Result:
    server: str
    models: int
    ready_s: float
    processes: int
    pss_mib: float
    rss_mib: float
    idle_cpu_pct: float
    first_p50_ms: float
    first_max_ms: float


FRAMEWORK_CONFIG = """name: "{name}"
backend: "{backend}"
max_batch_size: 0
input [ {{ name: "{inp}" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "{out}" data_type: TYPE_FP32 dims: [ 16 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
INPUT_NAME = {"identity": "INPUT0", "onnx": "INPUT0", "torch": "INPUT__0"}


def make_framework_repository(root: Path, count: int, backend: str) -> Path:
    """N identity models of the built-in ONNX Runtime or TorchScript backend."""
    repo = root / f"repo_{backend}_{count}"
    model = repo / "model_file"
    model.mkdir(parents=True)
    if backend == "torch":
        import torch

        class Identity(torch.nn.Module):
            def forward(self, x):
                return x

        torch.jit.script(Identity()).save(str(model / "model.pt"))
        names = ("pytorch", "model.pt", "INPUT__0", "OUTPUT__0")
    else:
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "identity",
            [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [16])],
            [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [16])])
        onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx_model.ir_version = 8
        onnx.save(onnx_model, str(model / "model.onnx"))
        names = ("onnxruntime", "model.onnx", "INPUT0", "OUTPUT0")
    backend_name, filename, inp, out = names
    for i in range(count):
        name = f"identity_{i:03d}"
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(model / filename, repo / name / "1" / filename)
        (repo / name / "config.pbtxt").write_text(FRAMEWORK_CONFIG.format(
            name=name, backend=backend_name, inp=inp, out=out))
    shutil.rmtree(model)
    return repo


def make_repository(root: Path, count: int) -> Path:
    repo = root / f"repo_{count}"
    config = (ANCHOR_MODEL / "config.pbtxt").read_text()
    for i in range(count):
        name = f"identity_{i:03d}"
        shutil.copytree(ANCHOR_MODEL / "1", repo / name / "1",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (repo / name / "config.pbtxt").write_text(
            config.replace('name: "identity_fp32"', f'name: "{name}"'))
    return repo


def _die_with_parent() -> None:
    """preexec_fn: no server outlives the bench (PR_SET_PDEATHSIG)."""
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)


def descendants(root: int) -> list[int]:
    """`root` and every process under it."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                todo.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return found


def memory_mib(pids: list[int]) -> tuple[float, float]:
    """PSS and RSS of `pids` together, in MiB (smaps_rollup)."""
    pss = rss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1])
        except OSError:
            continue
    return pss / 1024, rss / 1024


def wait_ready(port: int, proc: subprocess.Popen, start: float) -> float:
    while time.monotonic() - start < READY_TIMEOUT_S:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/v2/health/ready")
            status = conn.getresponse().status
            conn.close()
            if status == 200:
                return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError("not ready in time")


def first_requests(port: int, count: int, body: bytes = BODY) -> list[float]:
    """The latency of each model's first request, in ms, one after another."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        conn.request("POST", f"/v2/models/identity_{i:03d}/infer", body,
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = response.read()
        latencies.append((time.perf_counter() - started) * 1000)
        if response.status != 200:
            raise RuntimeError(f"identity_{i:03d}: {response.status} {answer[:200]!r}")
    conn.close()
    return latencies


def measure(server: str, repo: Path, count: int, idle_s: float, pbserve_args: list[str],
            log_dir: Path, body: bytes = BODY) -> Result:
    http_port, grpc_port, metrics_port = free_ports(3)
    flags = ["--model-repository", str(repo), "--http-port", str(http_port),
             "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port)]
    plain = ["--stub-zygote", "false"] if server == "pbserve-plain" else []
    command = [sys.executable, "-m", "pbserve", *flags, *pbserve_args, *plain] \
        if server.startswith("pbserve") else [*TRITON_CMD, *flags]
    log_path = log_dir / f"{server}_{count}.log"
    with open(log_path, "wb") as log:
        start = time.monotonic()
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent, cwd=ROOT)
    try:
        ready_s = wait_ready(http_port, proc, start)
        time.sleep(SETTLE_S)
        pids = descendants(proc.pid)
        pss, rss = memory_mib(pids)
        cpu0, t0 = tree_cpu_s(proc.pid), time.monotonic()
        time.sleep(idle_s)
        idle = (tree_cpu_s(proc.pid) - cpu0) / (time.monotonic() - t0) * 100
        latencies = first_requests(http_port, count, body)
    except Exception as err:
        tail = log_path.read_text(errors="replace").splitlines()[-10:]
        raise RuntimeError(f"{server} at {count} models: {err}\n" + "\n".join(tail)) from None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(60)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return Result(server, count, ready_s, len(pids), pss, rss, idle,
                  statistics.median(latencies), max(latencies))


def print_results(results: list[Result]) -> None:
    print(f"{'server':<9} {'models':>6} {'ready s':>8} {'procs':>6} {'PSS MiB':>8} "
          f"{'RSS MiB':>8} {'idle CPU %':>10} {'1st req p50 ms':>14} {'max ms':>7}")
    for r in results:
        print(f"{r.server:<9} {r.models:>6} {r.ready_s:>8.2f} {r.processes:>6} "
              f"{r.pss_mib:>8.0f} {r.rss_mib:>8.0f} {r.idle_cpu_pct:>10.2f} "
              f"{r.first_p50_ms:>14.2f} {r.first_max_ms:>7.2f}")
    by = {(r.server, r.models): r for r in results}
    for count in sorted({r.models for r in results}):
        ours = by.get(("pbserve", count))
        theirs, name = by.get(("triton", count)), "Triton"
        if theirs is None:
            theirs, name = by.get(("pbserve-plain", count)), "the plain start"
        if ours and theirs:
            print(f"pbserve / {name} at {count} models: ready "
                  f"{ours.ready_s / theirs.ready_s:.2f}x, PSS "
                  f"{ours.pss_mib / theirs.pss_mib:.2f}x, RSS "
                  f"{ours.rss_mib / theirs.rss_mib:.2f}x, first request p50 "
                  f"{ours.first_p50_ms / theirs.first_p50_ms:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="16,64", help="model counts, comma-separated")
    parser.add_argument("--servers", default="pbserve,triton")
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--pbserve-args", default="", help="more flags for pbserve")
    parser.add_argument("--backend", choices=("identity", "onnx", "torch"),
                        default="identity", help="the models: Python (identity_fp32), "
                        "or the built-in ONNX Runtime or TorchScript backend's")
    args = parser.parse_args()
    body = BODY.replace(b'"INPUT0"', f'"{INPUT_NAME[args.backend]}"'.encode())
    counts = [int(c) for c in args.models.split(",")]
    servers = args.servers.split(",")
    results = []
    with tempfile.TemporaryDirectory(prefix="pbserve_scale_") as scratch:
        root = Path(scratch)
        for count in counts:
            repo = make_repository(root, count) if args.backend == "identity" \
                else make_framework_repository(root, count, args.backend)
            for server in servers:
                result = measure(server, repo, count, args.idle_s,
                                 shlex.split(args.pbserve_args), root, body)
                results.append(result)
                print(f"# {server} at {count} models: ready in {result.ready_s:.2f} s",
                      flush=True)
    print_results(results)


if __name__ == "__main__":
    main()
