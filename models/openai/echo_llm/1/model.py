"""A stand-in LLM: the text_input / stream / text_output convention of Triton's LLM
backends (what pbserve's OpenAI endpoint sends a Python model), answering with the
words of its prompt: one response a word when streaming, else one with them all."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _text(words):
    return pb_utils.Tensor("text_output", np.array(["".join(words)], dtype=object))


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input")
            words = [w + " " for w in prompt.as_numpy().reshape(-1)[0].decode().split()]
            stream = pb_utils.get_input_tensor_by_name(request, "stream")
            sender = request.get_response_sender()
            if stream is not None and stream.as_numpy().reshape(-1)[0]:
                for word in words:
                    sender.send(pb_utils.InferenceResponse([_text([word])]))
            else:
                sender.send(pb_utils.InferenceResponse([_text(words)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
