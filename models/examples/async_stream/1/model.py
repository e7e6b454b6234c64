"""`async def execute` on a decoupled model: a fake text generator.

Every request gets CHUNKS text responses ("chunk 1/3 of 'hi' ", ...), one every
`chunk_delay_ms` (a config parameter), then the final flag. While a coroutine awaits,
the instance runs the others: a single instance has many requests in flight.
"""

import asyncio
import json

import numpy as np

import triton_python_backend_utils as pb_utils

DEFAULT_CHUNKS = 8


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.delay_s = int(config["parameters"]["chunk_delay_ms"]["string_value"]) / 1000

    async def execute(self, requests):
        # One coroutine per execute call; without dynamic batching that is one request.
        # Decoupled: it returns None; the responses go through the senders.
        await asyncio.gather(*(self.generate(request) for request in requests))

    async def generate(self, request):
        prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()[0]
        prompt = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
        chunks = pb_utils.get_input_tensor_by_name(request, "CHUNKS")
        count = int(chunks.as_numpy()[0]) if chunks is not None else DEFAULT_CHUNKS
        sender = request.get_response_sender()
        for i in range(count):
            if sender.is_cancelled():  # the client went away: stop early
                break
            await asyncio.sleep(self.delay_s)
            text = f"chunk {i + 1}/{count} of '{prompt}' "
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("TEXT", np.array([text.encode()], dtype=np.object_))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
