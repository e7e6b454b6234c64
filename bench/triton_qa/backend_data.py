"""Triton's QA model repositories for the ONNX Runtime and PyTorch backends, made with its
own generators (qa/common/gen_qa_*.py, unmodified) as qa/common/gen_qa_model_repository
runs them: the folder layout of tritonserver's /data/inferenceserver/<version>/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

# (generator, its flags, the repository it fills), per framework flag
GENERATED = (
    ("gen_qa_models.py", (), "qa_model_repository"),
    ("gen_qa_models.py", ("--variable",), "qa_variable_model_repository"),
    ("gen_qa_identity_models.py", (), "qa_identity_model_repository"),
    ("gen_qa_reshape_models.py", ("--variable",), "qa_reshape_model_repository"),
    ("gen_qa_sequence_models.py", (), "qa_sequence_model_repository"),
    ("gen_qa_sequence_models.py", ("--variable",), "qa_variable_sequence_model_repository"),
    ("gen_qa_implicit_models.py", (), "qa_sequence_implicit_model_repository"),
    ("gen_qa_implicit_models.py", ("--variable",),
     "qa_variable_sequence_implicit_model_repository"),
)
# gen_qa_model_repository makes the initial-state repositories for ONNX only
ONNX_ONLY = (
    ("gen_qa_implicit_models.py", ("--initial-state", "zero"),
     "qa_sequence_initial_state_implicit_model_repository"),
    ("gen_qa_implicit_models.py", ("--initial-state", "zero", "--variable"),
     "qa_variable_sequence_initial_state_implicit_model_repository"),
)


def generate(common: Path, data: Path) -> list[str]:
    """Run the generators in `common` (a copy of qa/common) into `data`; the commands run."""
    jobs = [(g, ("--onnx", *f), r) for g, f, r in GENERATED + ONNX_ONLY]
    jobs += [(g, ("--libtorch", *f), r) for g, f, r in GENERATED]
    return [run_generator(common, generator, flags, data / repo)
            for generator, flags, repo in jobs]


def run_generator(common: Path, generator: str, flags: tuple[str, ...], into: Path) -> str:
    """One of qa/common's generators, run in `common` (a copy of it) into `into`; the
    command, for the log."""
    argv = [generator, *flags, f"--models_dir={into}"]
    subprocess.run([sys.executable, *argv], cwd=common, check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=str(common)))
    return " ".join(argv)


_IR_TOO_NEW = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")
_OPSET_TOO_NEW = re.compile(r"Opset (\d+) is under development.*support for domain ai.onnx is "
                            r"till opset (\d+)", re.S)


def fit_onnx(folder: Path) -> str:
    """Where the onnx package that wrote the ONNX models under `folder` is newer than this
    onnxruntime (the GPU machine's image: onnx 1.23 writes IR 14 and opset 28, its
    onnxruntime 1.30 reads IR 13 and opset 26; gen_qa_model_repository pins a matching
    pair), convert them to the newest opset it reads (onnx.version_converter) and lower
    their IR version to match. What was done, for the log ("" if nothing)."""
    models = sorted(folder.rglob("*.onnx"))
    if not models:
        return ""
    ir, opset = _onnxruntime_limits(models[0])
    if ir is None and opset is None:
        return ""
    for path in models:
        _convert(path, ir, opset)
    return f"{len(models)} ONNX models converted for this onnxruntime: " + ", ".join(
        part for part in (f"opset {opset}" if opset else "", f"IR version {ir}" if ir else "")
        if part)


def _onnxruntime_limits(path: Path) -> tuple[int | None, int | None]:
    """(newest IR version, newest opset) this onnxruntime reads, where `path`'s are newer:
    read from its refusals, `path` converted after each."""
    import onnxruntime

    ir = opset = None
    for _ in range(3):
        try:
            onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            break
        except Exception as error:  # noqa: BLE001 - only these two refusals are handled
            ir_found, opset_found = _IR_TOO_NEW.search(str(error)), \
                _OPSET_TOO_NEW.search(str(error))
            if ir_found:
                ir = int(ir_found.group(2))
            elif opset_found:
                opset = int(opset_found.group(2))
            else:
                break
            _convert(path, ir, opset)
    return ir, opset


def _convert(path: Path, ir: int | None, opset: int | None) -> None:
    import onnx
    from onnx import version_converter

    model = onnx.load(str(path))
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset is not None and current > opset:
        model = version_converter.convert_version(model, opset)
    if ir is not None and model.ir_version > ir:
        model.ir_version = ir
    onnx.save(model, str(path))
