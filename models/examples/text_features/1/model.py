"""TEXT -> FEATURES: length / 20 and the fractions of vowels, digits and capitals."""

import numpy as np
import triton_python_backend_utils as pb_utils


def features(text: str) -> list[float]:
    letters = max(len(text), 1)
    return [len(text) / 20,
            sum(c in "aeiouAEIOU" for c in text) / letters,
            sum(c.isdigit() for c in text) / letters,
            sum(c.isupper() for c in text) / letters]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            rows = [features(t[0].decode("utf-8", "replace")) for t in texts]
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("FEATURES", np.array(rows, np.float32))]))
        return responses
