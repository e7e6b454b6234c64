"""Answers the version it was loaded as (the same file in every version directory)."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = args["model_version"].encode()

    def execute(self, requests):
        out = pb_utils.Tensor("VERSION", np.array([self.version], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
