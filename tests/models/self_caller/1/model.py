"""Calls itself with its only instance busy: pbserve answers the BLS call with an error
instead of hanging forever; the model returns that error's text."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            depth = pb_utils.get_input_tensor_by_name(request, "DEPTH").as_numpy()
            answer = pb_utils.InferenceRequest(
                model_name="self_caller",
                inputs=[pb_utils.Tensor("DEPTH", depth + 1)],
                requested_output_names=["ERROR"]).exec()
            text = answer.error().message() if answer.has_error() else "no error"
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("ERROR", np.array([text.encode()], dtype=np.object_))]))
        return responses
