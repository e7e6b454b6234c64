"""A decoupled model breaking Triton's rules on purpose, as MODE says:
`return_list` returns responses from execute; `send_after_final` sends after FINAL."""

import numpy as np

import triton_python_backend_utils as pb_utils


def out(value):
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor("OUT", np.array([value], np.int32))])


class TritonPythonModel:
    def execute(self, requests):
        mode = pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy()[0].decode()
        if mode == "return_list":
            return [out(1) for _ in requests]
        for request in requests:
            sender = request.get_response_sender()
            sender.send(out(1), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            sender.send(out(2))  # raises: the sender is closed
        return None
