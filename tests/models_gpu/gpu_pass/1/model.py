"""Answers with its input as it is (DLPack, no copy), wherever it arrived, and says
whether it arrived on the GPU (FORCE_CPU_ONLY_INPUT_TENSORS "no": a GPU input stays)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            source = pb_utils.get_input_tensor_by_name(request, "IN")
            out = pb_utils.Tensor.from_dlpack("OUT", source.to_dlpack())
            on_gpu = pb_utils.Tensor("ON_GPU", np.array([not source.is_cpu()]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out, on_gpu]))
        return responses
