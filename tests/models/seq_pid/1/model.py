"""A running sum per sequence, answered with the pid of the process that keeps it and
the control tensors as the sequence batcher set them."""

import os

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
            corrid = int(_tensor(request, "CORRID")[0])
            start = _tensor(request, "START")
            if start[0]:
                self.sums[corrid] = 0
            self.sums[corrid] += int(_tensor(request, "VALUE")[0])
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SUM", np.array([self.sums[corrid]], np.int32)),
                pb_utils.Tensor("PID", np.array([os.getpid()], np.int64)),
                pb_utils.Tensor("START_OUT", start.copy()),
                pb_utils.Tensor("END_OUT", _tensor(request, "END").copy()),
                pb_utils.Tensor("READY_OUT", _tensor(request, "READY").copy()),
                pb_utils.Tensor("CORRID_OUT", _tensor(request, "CORRID").copy()),
            ]))
        return responses
