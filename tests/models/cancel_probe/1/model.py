"""Waits (10 s at most) for its request to be cancelled; writes what it saw to MARKER."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            marker = pb_utils.get_input_tensor_by_name(request, "MARKER").as_numpy()[0].decode()
            at_start = request.is_cancelled()
            deadline = time.monotonic() + 10
            while not request.is_cancelled() and time.monotonic() < deadline:
                time.sleep(0.01)
            seen = request.is_cancelled()
            with open(marker, "w") as f:
                json.dump({"cancelled": seen, "at_start": at_start,
                           "sender": request.get_response_sender().is_cancelled()}, f)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([seen]))]))
        return responses
