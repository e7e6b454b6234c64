"""Calls the model named by its MODEL_NAME input, passing the input's element (bytes) and
other bytes where the API takes a string; a failed call fails the request."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            responses.append(self.forward(request))
        return responses

    def forward(self, request):
        name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
        pb_utils.Logger.log_info(b'calling "' + name + b'"')
        dummy = pb_utils.Tensor(b"DUMMY", np.array([0], np.int32))
        answer = pb_utils.InferenceRequest(
            model_name=name, request_id=b"by-name", inputs=[dummy],
            requested_output_names=[b"REPORT"]).exec()
        if answer.has_error():
            raise pb_utils.TritonModelException(answer.error().message())
        return pb_utils.InferenceResponse(answer.output_tensors())
