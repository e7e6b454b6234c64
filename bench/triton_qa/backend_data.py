"""Triton's QA model repositories for the ONNX Runtime and PyTorch backends, made with its
own generators (qa/common/gen_qa_*.py, unmodified) as qa/common/gen_qa_model_repository
runs them: the folder layout of tritonserver's /data/inferenceserver/<version>/."""

from __future__ import annotations

import os
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
    commands = []
    env = dict(os.environ, PYTHONPATH=str(common))
    jobs = [(g, ("--onnx", *f), r) for g, f, r in GENERATED + ONNX_ONLY]
    jobs += [(g, ("--libtorch", *f), r) for g, f, r in GENERATED]
    for generator, flags, repo in jobs:
        argv = [generator, *flags, f"--models_dir={data / repo}"]
        subprocess.run([sys.executable, *argv], cwd=common, env=env, check=True,
                       capture_output=True)
        commands.append(" ".join(argv))
    return commands
