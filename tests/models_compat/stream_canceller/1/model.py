"""Reads a BLS stream of `stubborn_stream`, cancels it after the first response and
reads on: answers (as JSON) every response it got."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            stream = pb_utils.InferenceRequest(
                model_name="stubborn_stream", inputs=request.inputs(),
                requested_output_names=["IDX", "CANCELLED"]).exec(decoupled=True)
            got = []
            for response in stream:
                if response.has_error():
                    got.append({"error": response.error().message()})
                    continue
                idx = pb_utils.get_output_tensor_by_name(response, "IDX")
                if idx is None:
                    got.append("final")  # the empty last response
                    continue
                cancelled = pb_utils.get_output_tensor_by_name(response, "CANCELLED")
                got.append([int(idx.as_numpy()[0]), bool(cancelled.as_numpy()[0])])
                if len(got) == 1:
                    stream.cancel()
            out = pb_utils.Tensor("REPORT", np.array([json.dumps(got).encode()], np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
