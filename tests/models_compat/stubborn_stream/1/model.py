"""Decoupled, ignores cancellation: sends COUNT responses whatever happens. After the
first it waits (5 s at most) to see its request cancelled, then sends the rest, each
saying whether the request was cancelled by then."""

import time

import numpy as np

import triton_python_backend_utils as pb_utils

WAIT_S = 5.0


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for idx in range(count):
                if idx == 1:
                    deadline = time.monotonic() + WAIT_S
                    while not request.is_cancelled() and time.monotonic() < deadline:
                        time.sleep(0.005)
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("IDX", np.array([idx], np.int32)),
                    pb_utils.Tensor("CANCELLED", np.array([request.is_cancelled()]))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
