"""An `async def execute` (decoupled) that sends its pid, then raises when FAIL is true,
leaving its request open; otherwise it sends the final flag."""

import asyncio
import os

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("PID", np.array([os.getpid()], np.int64))]))
            await asyncio.sleep(0)
            if bool(pb_utils.get_input_tensor_by_name(request, "FAIL").as_numpy()[0]):
                raise ValueError("coroutine_raises: failing on purpose")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
