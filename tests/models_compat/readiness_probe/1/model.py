"""`async def is_ready`, doing what the last request's MODE says: "ready", "not_ready",
"raise", or "slow" (answers True after 5.5 s). A request answers how many times
is_ready was called so far."""

import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils

SLOW_S = 5.5


class TritonPythonModel:
    def initialize(self, args):
        self.mode = b"ready"
        self.calls = 0

    async def is_ready(self):
        self.calls += 1
        if self.mode == b"raise":
            raise RuntimeError("readiness_probe: failing on purpose")
        if self.mode == b"slow":
            await asyncio.sleep(SLOW_S)
        return self.mode != b"not_ready"

    def execute(self, requests):
        responses = []
        for request in requests:
            self.mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0]
            calls = pb_utils.Tensor("CALLS", np.array([self.calls], np.int32))
            responses.append(pb_utils.InferenceResponse([calls]))
        return responses
