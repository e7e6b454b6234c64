"""Answers, as one JSON string, the args dict initialize() received."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = json.dumps({k: v for k, v in args.items()}).encode()

    def execute(self, requests):
        out = pb_utils.Tensor("ARGS", np.array([self.args], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
