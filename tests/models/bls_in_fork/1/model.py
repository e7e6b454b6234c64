"""Calls the identity example by BLS from a process it forks (as Triton's bls model's
test_multiprocess does with a multiprocessing Pool) and answers with the error its
answer had there ("" if none)."""

import multiprocessing

import numpy as np
import triton_python_backend_utils as pb_utils


def _call(data):
    answer = pb_utils.InferenceRequest(
        model_name="identity", inputs=[pb_utils.Tensor("INPUT_FP32", data)],
        requested_output_names=["OUTPUT_FP32"]).exec()
    return answer.error().message() if answer.has_error() else ""


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT_FP32").as_numpy()
            with multiprocessing.get_context("fork").Pool(1) as pool:
                raised = pool.apply_async(_call, (data.copy(),)).get(timeout=30)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("ERROR", np.array([raised.encode()], dtype=object))]))
        return responses
