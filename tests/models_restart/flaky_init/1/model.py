"""initialize fails while the file `fail_init` exists in the model's directory."""

import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists(os.path.join(args["model_repository"], "fail_init")):
            raise RuntimeError("flaky_init: fail_init is there")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "PID", np.array([os.getpid()], dtype=np.int64))]) for _ in requests]
