"""Loaded and unloaded by parity_control; answers its "who" config parameter."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.who = params["who"]["string_value"].encode()

    def execute(self, requests):
        out = pb_utils.Tensor("WHO", np.array([self.who], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
