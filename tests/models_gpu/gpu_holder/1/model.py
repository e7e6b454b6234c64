"""Asks gpu_producer for a GPU tensor (by CUDA IPC) and, with HOLD, keeps it; answers
with what gpu_producer said of its pool (LIVE) and this stub's pid, to be killed."""

import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.held = []

    def execute(self, requests):
        responses = []
        for request in requests:
            hold = bool(pb_utils.get_input_tensor_by_name(request, "HOLD").as_numpy()[0])
            answer = pb_utils.InferenceRequest(
                model_name="gpu_producer", requested_output_names=["OUT", "LIVE"],
                inputs=[pb_utils.Tensor("N", np.array([1 << 20], np.int32))]).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUT")
            assert not out.is_cpu()
            if hold:
                self.held.append(out)
            live = pb_utils.get_output_tensor_by_name(answer, "LIVE").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("LIVE", live.copy()),
                pb_utils.Tensor("PID", np.array([os.getpid()], np.int32))]))
        return responses
