"""Things a model gets wrong, to compare with what Triton does with them.

MODE "dtype": OUT_A as INT32 (the config says FP32), OUT_B never, EXTRA (not in the
config) too. MODE "dlpack": a Tensor from a non-contiguous DLPack array.
"""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
            if mode == "dlpack":
                strided = np.arange(8, dtype=np.float32)[::2]
                pb_utils.Tensor.from_dlpack("OUT_A", strided)  # raises
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT_A", np.array([7], dtype=np.int32)),
                pb_utils.Tensor("EXTRA", np.array([1.5], dtype=np.float32)),
            ]))
        return responses
