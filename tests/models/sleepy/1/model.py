"""Sleeps SLEEP_MS milliseconds, then answers the pid of its process."""

import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            ms = int(pb_utils.get_input_tensor_by_name(request, "SLEEP_MS").as_numpy()[0])
            time.sleep(ms / 1000)
            pid = pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))
            responses.append(pb_utils.InferenceResponse(output_tensors=[pid]))
        return responses

    def finalize(self):
        marker = os.environ.get("PBSERVE_TEST_FINALIZE_MARKER")
        if marker:
            with open(marker, "a") as f:
                f.write(f"finalized {os.getpid()}\n")
