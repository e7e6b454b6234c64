"""Echoes IN and reports how many requests this execute() call received."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        count = len(requests)
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", value.copy()),
                pb_utils.Tensor("REQUESTS_IN_EXECUTE",
                                np.full(value.shape, count, dtype=np.int32)),
            ]))
        return responses
