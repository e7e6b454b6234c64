"""Answers with the version directory it was loaded from."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        out = np.array([self.version], dtype=np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("VERSION", out)])
                for _ in requests]
