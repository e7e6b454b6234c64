"""A 64 MiB tensor through the three-step identity ensemble against one direct call.

    python bench/ensemble.py [--seconds 3] [--mib 64]

bench/ensemble_models: `identity3` (identity_step three times in a row) against
`identity_step` itself, through the backend on the parent's event loop (manager.infer),
outputs viewed, not copied, at the end. The tensor is copied once into shared memory and
then handed from step to step as it is, so the ensemble should cost about what one call
costs. Prints both times and the ratio. Nothing is asserted. Against the real Triton:
`python3 ../shared/perf/vs.py --repo bench/ensemble_models --model identity3 --rows identity`
(the 16 MiB rows; docs/performance.md has a run).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pbserve.backend.manager import ModelManager  # noqa: E402
from pbserve.backend.types import InferRequest, TensorData  # noqa: E402

MIB = 1 << 20
REPO = Path(__file__).resolve().parent / "ensemble_models"


async def measure(seconds: float, mib: int) -> tuple[float, float]:
    manager = ModelManager([REPO])
    await manager.start()
    data = np.ones(mib * MIB // 4, np.float32)

    async def call(model: str) -> None:
        request = InferRequest(model, inputs=[
            TensorData("INPUT0", "FP32", data.shape, memoryview(data).cast("B"))])
        response = await manager.infer(request)
        assert response.error is None, response.error
        assert response.outputs[0].data.nbytes == data.nbytes
        response.release()

    async def timed(model: str) -> float:
        await call(model)
        n, start = 0, time.perf_counter()
        while n < 3 or time.perf_counter() - start < seconds:
            await call(model)
            n += 1
        return (time.perf_counter() - start) / n

    try:
        return await timed("identity_step"), await timed("identity3")
    finally:
        await manager.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    try:
        import uvloop
        run = uvloop.run
    except ImportError:
        run = asyncio.run
    direct, ensemble = run(measure(args.seconds, args.mib))
    print(f"one call (identity_step)            {direct * 1e3:8.2f} ms")
    print(f"three-step ensemble (identity3)     {ensemble * 1e3:8.2f} ms")
    print(f"ensemble / call = {ensemble / direct:.2f}x")


if __name__ == "__main__":
    main()
