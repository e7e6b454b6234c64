"""Answers its stub's pid; `initialize` fails while a file `broken` is in its folder."""

import os

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists(os.path.join(args["model_repository"], "broken")):
            raise RuntimeError("fragile: the file 'broken' is there")

    def execute(self, requests):
        pid = pb_utils.Tensor("PID", np.array([os.getpid()], np.int64))
        return [pb_utils.InferenceResponse([pid]) for _ in requests]
