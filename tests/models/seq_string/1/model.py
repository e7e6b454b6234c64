"""A running sum per string correlation id; echoes the CORRID control tensor and
request.correlation_id()."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _tensor(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = _tensor(request, "CORRID").reshape(-1)[0]
            if _tensor(request, "START").reshape(-1)[0]:
                self.sums[corrid] = 0
            self.sums[corrid] += int(_tensor(request, "VALUE").reshape(-1)[0])
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SUM", np.array([[self.sums[corrid]]], np.int32)),
                pb_utils.Tensor("CORRID_OUT", np.array([[corrid]], np.object_)),
                pb_utils.Tensor("REQUEST_CORRID",
                                np.array([[request.correlation_id().encode()]], np.object_)),
            ]))
        return responses
