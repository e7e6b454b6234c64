"""Calls another model from `initialize`: Triton refuses BLS there, so the load fails."""

import numpy as np

import triton_python_backend_utils as pb_utils


def probe_request():
    dummy = pb_utils.Tensor("DUMMY", np.array([0], np.int32))
    return pb_utils.InferenceRequest(model_name="argv_probe", inputs=[dummy],
                                     requested_output_names=["REPORT"])


class TritonPythonModel:
    def initialize(self, args):
        probe_request().exec()

    def execute(self, requests):
        return [probe_request().exec() for _ in requests]
