"""A 64 MiB tensor through a two-hop BLS chain against the same data through one call.

    python bench/bls.py [--seconds 3]

`front` -> BLS -> `middle` -> BLS -> `ident`, each stage handing the tensor on as it is,
against a direct call of `ident`; both through the backend on the parent's event loop
(Model.infer), outputs viewed, not copied, at the end. Prints both times and the ratio
(target: the chain costs at most 1.3x the call). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pbserve.core.manager import ModelManager  # noqa: E402
from pbserve.core.types import InferRequest, TensorData  # noqa: E402

MIB = 1 << 20
CONFIG = '''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
'''
IDENT = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
'''
FORWARD = '''
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            answer = pb_utils.InferenceRequest(
                model_name="{target}", inputs=request.inputs(),
                requested_output_names=["OUTPUT0"]).exec()
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
'''


def write_repository(repo: Path) -> None:
    for name, code in (("ident", IDENT), ("middle", FORWARD.format(target="ident")),
                       ("front", FORWARD.format(target="middle"))):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (repo / name / "1" / "model.py").write_text(code)


async def measure(repo: Path, seconds: float, mib: int,
                  models: tuple[str, str] = ("ident", "front")) -> tuple[float, float]:
    """The mean time of a call of each of `models` (served from `repo`) with `mib` MiB."""
    manager = ModelManager([repo])
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
        return await timed(models[0]), await timed(models[1])
    finally:
        await manager.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        write_repository(repo)
        try:
            import uvloop
            run = uvloop.run
        except ImportError:
            run = asyncio.run
        direct, chain = run(measure(repo, args.seconds, args.mib))
    print(f"one call (ident)                       {direct * 1e3:8.2f} ms")
    print(f"two-hop BLS chain (front->middle->ident) {chain * 1e3:6.2f} ms")
    print(f"chain / call = {chain / direct:.2f}x  (target <= 1.3x)")


if __name__ == "__main__":
    main()
