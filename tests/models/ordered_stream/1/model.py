"""Decoupled echo. A request with the parameter "gate" (a file path) writes
"<gate>.started" and waits (at most 30 s) for the gate file before it answers; one with
"mark" writes that file once its answer is sent."""

import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            params = json.loads(request.parameters())
            gate = params.get("gate")
            if gate:
                with open(gate + ".started", "w"):
                    pass
                deadline = time.monotonic() + 30
                while not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.005)
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            request.get_response_sender().send(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", value.copy())]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            if params.get("mark"):
                with open(params["mark"], "w"):
                    pass
        return None
