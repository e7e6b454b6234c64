"""Answers with N floats made on the GPU, and LIVE: how many blocks of this stub's CUDA
pool other processes held when the request came (a test's window on the pool)."""

import cupy
import numpy as np
import triton_python_backend_utils as pb_utils
from backend_utils._runtime import get_runtime


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            live = get_runtime()._memory.gpu.live_blocks()
            count = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            out = cupy.arange(count, dtype=cupy.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor.from_dlpack("OUT", out),
                pb_utils.Tensor("LIVE", np.array([live], np.int32))]))
        return responses
