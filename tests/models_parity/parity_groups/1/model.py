"""Logs its instance name at initialize; answers it."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        pb_utils.Logger.log_info(f"parity-instance {self.name} kind {args['model_instance_kind']}")

    def execute(self, requests):
        out = pb_utils.Tensor("INSTANCE", np.array([self.name.encode()], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
