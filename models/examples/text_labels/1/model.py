"""PROBS -> LABEL (the likeliest of words, numbers, shouting) and its SCORE."""

import numpy as np
import triton_python_backend_utils as pb_utils

LABELS = np.array([b"words", b"numbers", b"shouting"], dtype=object)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            probs = pb_utils.get_input_tensor_by_name(request, "PROBS").as_numpy()
            best = probs.argmax(axis=1)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("LABEL", LABELS[best].reshape(-1, 1)),
                pb_utils.Tensor("SCORE", probs.max(axis=1, keepdims=True))]))
        return responses
