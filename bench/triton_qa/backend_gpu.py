"""ONNX Runtime and PyTorch (TorchScript) models on KIND_GPU must give outputs bit-exact
with the same models on KIND_CPU, for the same inputs.

    python bench/triton_qa/backend_gpu.py --server-repo /tmp/triton-server [--out FILE] [--keep]

Triton's qa/common/gen_qa_models.py (--onnx, --libtorch; unmodified) makes MODELS; one
pbserve serves each as `<name>_cpu` (KIND_CPU) and `<name>_gpu` (KIND_GPU), latest version.
No CUDA GPU (pbserve would refuse KIND_GPU): only the CPU copies, every comparison a skip.
A KIND_GPU ONNX model whose onnxruntime lacks the CUDA execution provider runs on the CPU
(a warning in the server log): a skip saying so. Each row says where the `_gpu` instance
ran, as its backend logged it ("TRITONBACKEND_ModelInstanceInitialize: ... (GPU device 0)").
PBSERVE_BACKEND_GPU_FORCE=1 (to test this script without a GPU) builds the `_gpu` copies
as KIND_CPU, so the comparison runs between two CPU copies.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import triton_to_np_dtype

sys.path.insert(0, str(Path(__file__).resolve().parent))

import backend_data  # noqa: E402
import backend_edit  # noqa: E402
import report  # noqa: E402
from result import FAIL, PASS, SKIP, Result  # noqa: E402
from server import Server, pick_host  # noqa: E402

from pbserve.core.config.gpus import visible_gpus  # noqa: E402

MODELS = ("onnx_float32_float32_float32", "onnx_int32_int32_int32",
          "onnx_nobatch_float32_float32_float32", "onnx_float16_float16_float16",
          "libtorch_float32_float32_float32", "libtorch_int32_int32_int32",
          "libtorch_nobatch_float32_float32_float32")
FORCE = os.environ.get("PBSERVE_BACKEND_GPU_FORCE") == "1"
FALLBACK = "KIND_GPU instance, but this onnxruntime has no CUDA execution provider"
READY_S = 300.0


def header() -> str:
    import onnxruntime
    import torch
    return (f"torch {torch.__version__} (cuda available: {torch.cuda.is_available()}), "
            f"onnxruntime {onnxruntime.__version__}\n"
            f"onnxruntime providers: {onnxruntime.get_available_providers()}\n"
            f"CUDA GPUs the server sees: {visible_gpus() or 'none'}"
            + (" (PBSERVE_BACKEND_GPU_FORCE=1: _gpu copies are KIND_CPU)" if FORCE else ""))


def generate(common: Path, data: Path) -> list[str]:
    """gen_qa_models.py --onnx and --libtorch in `common` (a copy of qa/common)."""
    commands = [backend_data.run_generator(common, "gen_qa_models.py", (flag,), data)
                for flag in ("--onnx", "--libtorch")]
    lowered = backend_data.fit_onnx(data)
    return commands + ([lowered] if lowered else [])


def add_copy(src: Path, repo: Path, suffix: str, kind: str) -> None:
    model = backend_edit.copy(src, repo, f"{src.name}_{suffix}")
    backend_edit.sed(model, f'^name: "{src.name}"', f'name: "{model.name}"')
    backend_edit.sed(model, r"^version_policy: .*", "version_policy: { latest { num_versions: 1 }}")
    backend_edit.append(model, f"instance_group [ {{ kind: {kind} }} ]")


def build(data: Path, repo: Path, gpu: bool) -> list[str]:
    """The `_cpu` copies (and `_gpu` ones when `gpu`) of the generated MODELS; their names."""
    names = [n for n in MODELS if (data / n).is_dir()]
    for name in names:
        add_copy(data / name, repo, "cpu", "KIND_CPU")
        if gpu:
            add_copy(data / name, repo, "gpu", "KIND_CPU" if FORCE else "KIND_GPU")
    return names


def make_inputs(config: dict) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    batch = [4] if int(config.get("max_batch_size", 0)) > 0 else []
    inputs = []
    for spec in config["input"]:
        shape = batch + [16 if int(d) == -1 else int(d) for d in spec["dims"]]
        dtype = np.dtype(triton_to_np_dtype(spec["data_type"].removeprefix("TYPE_")))
        value = rng.integers(-100 * (dtype.kind == "i"), 100, size=shape) \
            if dtype.kind in "iu" else rng.standard_normal(shape)
        inputs.append((spec["name"], value.astype(dtype)))
    return inputs


def infer(client, model: str, inputs: list[tuple[str, np.ndarray]], outputs: list[str],
          reasons: dict[str, str]) -> dict[str, np.ndarray] | str:
    """`model`'s outputs for `inputs`, or why there are none."""
    request = [httpclient.InferInput(n, list(v.shape), httpclient.np_to_triton_dtype(v.dtype))
               for n, v in inputs]
    for tensor, (_, value) in zip(request, inputs):
        tensor.set_data_from_numpy(value)
    try:
        result = client.infer(model, request, outputs=[
            httpclient.InferRequestedOutput(o, binary_data=True) for o in outputs])
    except Exception as error:  # noqa: BLE001 - the row says what went wrong
        return reasons.get(model) or f"{type(error).__name__}: {error}"
    return {o: result.as_numpy(o) for o in outputs}


def compare(cpu: dict[str, np.ndarray], gpu: dict[str, np.ndarray]) -> str:
    """'' when every output is bit-exact, else what differs."""
    diffs = []
    for name, a in cpu.items():
        b = gpu[name]
        if a.dtype != b.dtype or a.shape != b.shape:
            diffs.append(f"{name}: {b.dtype}{list(b.shape)} vs {a.dtype}{list(a.shape)}")
            continue
        bits = f"u{a.itemsize}"  # the raw bytes, element by element
        differ = np.frombuffer(a.tobytes(), bits) != np.frombuffer(b.tobytes(), bits)
        if differ.any():
            diff = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))
            diffs.append(f"{name}: {differ.sum()} of {a.size} elements not bit-exact, "
                         f"max abs difference {diff:g}")
    return "; ".join(diffs)


def ran_on(log: str, model: str) -> str:
    """Where `model`'s instance says it runs (the backends' TRITONBACKEND_ModelInstance-
    Initialize line): "GPU device 0", "CPU device 0", or "" when it said nothing."""
    found = re.search(rf"TRITONBACKEND_ModelInstanceInitialize: {model}_\S* \((\w+ device \d+)\)",
                      log)
    return found.group(1) if found else ""


def check(client, name: str, gpu: bool, log: str, reasons: dict[str, str]) -> list[Result]:
    """The `_cpu` copy's row (it answers) and the comparison's row."""
    case = f"{name}_gpu vs _cpu"
    if reasons.get(f"{name}_cpu"):
        return [Result(f"{name}_cpu", FAIL, reasons[f"{name}_cpu"]),
                Result(case, SKIP, "the CPU copy did not load")]
    config = client.get_model_config(f"{name}_cpu")
    inputs, outputs = make_inputs(config), [o["name"] for o in config["output"]]
    cpu = infer(client, f"{name}_cpu", inputs, outputs, reasons)
    if isinstance(cpu, str):
        return [Result(f"{name}_cpu", FAIL, cpu), Result(case, SKIP, "the CPU copy failed")]
    rows = [Result(f"{name}_cpu", PASS, "answered " + ", ".join(
        f"{o} {v.dtype}{list(v.shape)}" for o, v in cpu.items()))]
    if not gpu:
        return rows + [Result(case, SKIP, "no CUDA GPU here")]
    answer = infer(client, f"{name}_gpu", inputs, outputs, reasons)
    if isinstance(answer, str):
        return rows + [Result(case, FAIL, answer)]
    differs = compare(cpu, answer)
    where = ran_on(log, f"{name}_gpu")
    if FORCE:
        where = f"{where or '?'} (PBSERVE_BACKEND_GPU_FORCE=1: the _gpu copy is KIND_CPU)"
    elif f"model '{name}_gpu': {FALLBACK}" in log:  # a skip: the GPU did not run it
        return rows + [Result(case, FAIL if differs else SKIP, "ran on the CPU: this onnxrun"
                              f"time has no CUDA execution provider; {differs or 'bit-exact'}")]
    elif not where.startswith("GPU"):
        return rows + [Result(case, FAIL, f"{differs or 'bit-exact'}, but the instance ran "
                              f"on {where or 'a device it did not log'}")]
    return rows + [Result(case, FAIL if differs else PASS,
                          f"{differs or 'bit-exact'}; ran on {where}")]


def run(data: Path, repo: Path, log_path: Path, rows: list[Result], notes: list[str]) -> None:
    gpu = bool(visible_gpus()) or FORCE
    names = build(data, repo, gpu)
    host = pick_host()
    if host is None:
        raise RuntimeError("ports 8000-8002 are busy on 127.0.0.1-3")
    # a model that fails to load fails its row, not the whole server
    server = Server(repo, host, log_path, ("--exit-on-error", "false",
                                           "--strict-readiness", "false"))
    try:
        if not server.wait("/v2/health/ready", READY_S):
            rows.extend(Result(n, FAIL, "server not ready (log tail above)") for n in names)
            notes.append("Server log tail:\n" + server.log_text()[-3000:])
            return
        client = httpclient.InferenceServerClient(f"{host}:8000")
        reasons = {m["name"]: m.get("reason", "") for m in client.get_model_repository_index()}
        log = server.log_text()
        for name in names:
            rows.extend(check(client, name, gpu, log, reasons))
        client.close()
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-repo", type=Path, required=True)
    parser.add_argument("--out", type=Path, help="also write the output to this file")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="triton-qa-gpu-"))
    rows: list[Result] = []
    notes: list[str] = []
    started = time.monotonic()
    try:
        notes.append(header())
        common, data = work / "common", work / "data" / "qa_model_repository"
        shutil.copytree(args.server_repo / "qa" / "common", common, symlinks=True)
        notes.append("Generators run (qa/common, unmodified):\n" + "\n".join(
            f"  {c}" for c in generate(common, data)))
        run(data, work / "repository", work / "server.log", rows, notes)
    finally:
        text = "\n\n".join([*notes, report.table(rows) if rows else "(no rows)",
                            report.summary(rows) + f" in {time.monotonic() - started:.0f} s"])
        report.finish(text + "\n", args.out, work, args.keep)
    return 1 if any(r.status == FAIL for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
