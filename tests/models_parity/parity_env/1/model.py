"""Answers the interpreter it runs in (EXECUTION_ENV_PATH); the test builds pyenv."""

import sys

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = pb_utils.Tensor("EXECUTABLE", np.array([sys.executable.encode()], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
