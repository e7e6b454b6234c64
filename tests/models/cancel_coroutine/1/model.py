"""Opts in to coroutine cancellation: waits 30 s; when its request is cancelled the
coroutine gets asyncio.CancelledError, which it records in MARKER."""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        request = requests[0]
        marker = pb_utils.get_input_tensor_by_name(request, "MARKER").as_numpy()[0].decode()
        sender = request.get_response_sender()
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("STARTED", np.array([True]))]))
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            with open(marker, "w") as f:
                f.write('{"coroutine": "cancelled"}')
            raise
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
