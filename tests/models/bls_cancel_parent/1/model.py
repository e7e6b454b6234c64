"""Forwards its request to cancel_probe through BLS: cancelling this request must
cancel that child request too (the child writes whether it saw it)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            answer = pb_utils.InferenceRequest(
                model_name="cancel_probe", inputs=request.inputs(),
                requested_output_names=["SEEN"]).exec()
            responses.append(answer)
        return responses
