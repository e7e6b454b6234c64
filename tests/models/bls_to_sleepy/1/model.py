"""Hands its request to `sleepy` by a sync BLS call from `execute` (the stub's main
thread waits for the answer) and answers with sleepy's answer."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceRequest(model_name="sleepy", inputs=request.inputs(),
                                          requested_output_names=["PID"]).exec()
                for request in requests]
