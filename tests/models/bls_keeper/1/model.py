"""Keeps every BLS output it gets (identity's answer to its own input, which identity
lends back without a copy) and answers the first element of each, oldest first: what a
model keeps must stay valid after its request is over."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.kept = []

    def execute(self, requests):
        responses = []
        for request in requests:
            answer = pb_utils.InferenceRequest(
                model_name="identity", inputs=request.inputs(),
                requested_output_names=["OUTPUT_FP32"]).exec()
            self.kept.append(pb_utils.get_output_tensor_by_name(answer, "OUTPUT_FP32").as_numpy())
            firsts = np.array([float(a[0]) for a in self.kept], dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("KEPT", firsts)]))
        return responses
