"""For bench/streaming.py: CHUNKS responses, each after `await asyncio.sleep(DELAY_MS)`."""

import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            chunks = int(pb_utils.get_input_tensor_by_name(request, "CHUNKS").as_numpy()[0])
            delay = int(pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(chunks):
                await asyncio.sleep(delay / 1000)
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("INDEX", np.array([i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
