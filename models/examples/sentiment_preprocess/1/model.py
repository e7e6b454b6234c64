"""Step 1 of the `sentiment` ensemble: counts each known word of TEXT in a slot of its
own (16 slots of positive words, 16 of negative ones), the vectors `add_sub` takes."""

import numpy as np
import triton_python_backend_utils as pb_utils

POSITIVE = ["good", "great", "fast", "love", "nice", "happy", "excellent", "clean",
            "easy", "best", "fine", "solid", "smooth", "calm", "bright", "safe"]
NEGATIVE = ["bad", "slow", "hate", "awful", "broken", "sad", "poor", "dirty",
            "hard", "worst", "wrong", "weak", "rough", "angry", "dark", "unsafe"]


def counts(words, vocabulary):
    return np.array([words.count(w) for w in vocabulary], dtype=np.float32)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()[0]
            words = text.decode("utf-8", "replace").lower().replace(",", " ").split()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("POSITIVE", counts(words, POSITIVE)),
                pb_utils.Tensor("NEGATIVE", counts(words, NEGATIVE))]))
        return responses
