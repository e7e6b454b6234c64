"""Identity for every Triton datatype: each INPUT_<TYPE> sent comes back as OUTPUT_<TYPE>."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = [
                pb_utils.Tensor(tensor.name().replace("INPUT_", "OUTPUT_", 1), tensor.as_numpy())
                for tensor in request.inputs()
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
