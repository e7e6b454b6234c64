"""A non-decoupled model answering as MODE says: `wrong_count` returns no response for
its request; `sender_final` sends one response with FINAL; `sender_then_final` sends
the response, then FINAL on its own. The sender modes return None from execute."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy()[0].decode()
        if mode == "wrong_count":
            return []
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            sender = request.get_response_sender()
            response = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUT", np.array([7], np.int32))])
            if mode == "sender_final":
                sender.send(response, flags=final)
            else:
                sender.send(response)
                sender.send(flags=final)
        return None
