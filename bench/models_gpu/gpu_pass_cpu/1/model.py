"""Answers with its input as it is; takes CPU inputs (FORCE_CPU_ONLY_INPUT_TENSORS's
default), so a GPU tensor reaches it through host memory."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor.from_dlpack(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").to_dlpack())]) for r in requests]
