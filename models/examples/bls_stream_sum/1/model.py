"""A decoupled BLS consumer: streams `repeat`'s answers for IN and sends the running
total after each one, then the final flag.

`await request.async_exec(decoupled=True)` gives an iterator of `repeat`'s responses;
pbserve lets a coroutine read it with `async for` (Triton's blocking `for` works too).
The last response of a decoupled stream carries no outputs: it only says "final".
"""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.gather(*(self.run(request) for request in requests))

    async def run(self, request):
        sender = request.get_response_sender()
        values = pb_utils.get_input_tensor_by_name(request, "IN")
        stream = await pb_utils.InferenceRequest(
            model_name="repeat", inputs=[values], requested_output_names=["OUT"]
        ).async_exec(decoupled=True)
        total = 0
        async for answer in stream:
            if answer.has_error():
                sender.send(pb_utils.InferenceResponse(error=answer.error()),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            out = pb_utils.get_output_tensor_by_name(answer, "OUT")
            if out is None:
                continue  # the flag-only final response of the stream
            total += int(out.as_numpy()[0])
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("TOTAL", np.array([total], dtype=np.int64))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
