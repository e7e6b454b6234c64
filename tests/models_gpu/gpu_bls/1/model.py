"""Adds one on the GPU, then asks gpu_scale (BLS) with that GPU tensor as its input."""

import cupy
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            plus_one = cupy.asarray(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()) + 1
            call = pb_utils.InferenceRequest(
                model_name="gpu_scale", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor.from_dlpack("IN", plus_one)])
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUT")
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
