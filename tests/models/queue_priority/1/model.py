"""Echoes IN and the number of the execute() call that ran it (1, 2, ...).

A request with the parameter "gate" (a file path) first writes "<gate>.started", then
waits (at most 30 s) until the gate file exists: the test holds the only instance busy
while it queues other requests behind it.
"""

import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        responses = []
        for request in requests:
            gate = json.loads(request.parameters()).get("gate")
            if gate:
                with open(gate + ".started", "w"):
                    pass
                deadline = time.monotonic() + 30
                while not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.005)
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", value.copy()),
                pb_utils.Tensor("CALL", np.full(value.shape, self.calls, dtype=np.int32)),
            ]))
        return responses
