"""BLS works in `execute`; in `finalize` Triton refuses it (the error is only logged)."""

import numpy as np

import triton_python_backend_utils as pb_utils


def probe_request():
    dummy = pb_utils.Tensor("DUMMY", np.array([0], np.int32))
    return pb_utils.InferenceRequest(model_name="argv_probe", inputs=[dummy],
                                     requested_output_names=["REPORT"])


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for _ in requests:
            answer = probe_request().exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            responses.append(pb_utils.InferenceResponse(answer.output_tensors()))
        return responses

    def finalize(self):
        probe_request().exec()
