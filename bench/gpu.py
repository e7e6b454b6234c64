"""GPU tensors between stubs by CUDA IPC, against the host round trip and a device copy.

    python bench/gpu.py [--mib 1024] [--repeat 5]

On a machine with a CUDA GPU and cupy (the `device` tool's GPU machine: bench/gpu_run.sh
runs it), through real stubs: a `--mib` device tensor passed model A -> B -> A
  - by CUDA IPC (B takes GPU inputs and answers with its input as it is),
  - through host memory (B takes CPU inputs; A asks for CPU outputs and copies back),
against one device-to-device copy of the tensor (cupy, in A). Then the first-use cost
of opening a CUDA IPC handle in another process (shm/cuda_region.py), against a mapping
already open. Prints medians and ratios; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pbserve.testing import load_models  # noqa: E402

REPOS = (ROOT / "bench" / "models_gpu", ROOT / "tests" / "models_gpu")

_OPEN = textwrap.dedent("""
    import sys, time
    from shm.pool import RegionMap
    regions = RegionMap()
    start = time.perf_counter()
    regions.cuda.pointer(sys.argv[1], 0, 8)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(1000):
        regions.cuda.pointer(sys.argv[1], 0, 8)
    print(first, (time.perf_counter() - start) / 1000)
""")


def round_trips(mib: int, repeat: int) -> dict[str, float]:
    medians = {}
    with load_models(*REPOS, models=["gpu_round_trip", "gpu_pass", "gpu_pass_cpu"]) as models:
        for path in ("memcpy", "ipc", "host"):
            out = models.infer("gpu_round_trip", {"MIB": np.array([mib], np.int32)},
                               parameters={"path": path, "repeat": str(repeat)})
            runs = out["SECONDS"]
            medians[path] = statistics.median(runs)
            print(f"  {path:7s} median {medians[path] * 1e3:9.3f} ms   runs (ms): "
                  + " ".join(f"{r * 1e3:.3f}" for r in runs))
    return medians


def handle_open(mib: int) -> tuple[float, float]:
    from shm.cuda_region import CudaRegion

    region = CudaRegion(0, mib << 20, "pbserve-bench-open")
    try:
        done = subprocess.run([sys.executable, "-c", _OPEN, region.name], check=True,
                              capture_output=True, text=True, cwd=ROOT)
        first, cached = map(float, done.stdout.split())
    finally:
        region.close()
    return first, cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.mib} MiB device tensor, A -> B -> A, {args.repeat} timed runs each:")
    medians = round_trips(args.mib, args.repeat)
    print(f"IPC round trip / device memcpy: {medians['ipc'] / medians['memcpy']:.2f}x "
          f"(target <= 1.5x)")
    print(f"host round trip / IPC round trip: {medians['host'] / medians['ipc']:.1f}x")
    first, cached = handle_open(args.mib)
    print(f"opening a CUDA IPC handle ({args.mib} MiB allocation) in another process: "
          f"first use {first * 1e3:.3f} ms, mapped already {cached * 1e6:.2f} us")


if __name__ == "__main__":
    main()
