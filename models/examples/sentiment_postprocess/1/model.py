"""Step 3 of the `sentiment` ensemble: SCORE = (positive - negative) / all known words,
in [-1, 1]; LABEL names its sign."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            total = pb_utils.get_input_tensor_by_name(request, "TOTAL").as_numpy().sum()
            balance = pb_utils.get_input_tensor_by_name(request, "BALANCE").as_numpy().sum()
            score = float(balance / total) if total else 0.0
            label = "positive" if score > 0 else "negative" if score < 0 else "neutral"
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("LABEL", np.array([label.encode()], dtype=object)),
                pb_utils.Tensor("SCORE", np.array([score], dtype=np.float32))]))
        return responses
