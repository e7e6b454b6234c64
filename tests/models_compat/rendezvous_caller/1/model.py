"""Decoupled, async: makes CALLS gathered BLS calls to `rendezvous`, each read with a
plain (blocking) `for` over `await async_exec(decoupled=True)`, and answers every SEEN."""

import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.gather(*(self.serve(request) for request in requests))

    async def serve(self, request):
        calls = int(pb_utils.get_input_tensor_by_name(request, "CALLS").as_numpy()[0])
        inputs = [pb_utils.get_input_tensor_by_name(request, name)
                  for name in ("PARTIES", "GROUP")]
        seen = await asyncio.gather(*(self.call(inputs) for _ in range(calls)))
        out = pb_utils.Tensor("SEEN", np.array([s for one in seen for s in one], np.int32))
        request.get_response_sender().send(
            pb_utils.InferenceResponse([out]),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    async def call(self, inputs):
        bls = pb_utils.InferenceRequest(model_name="rendezvous", inputs=inputs,
                                        requested_output_names=["SEEN"])
        seen = []
        for response in await bls.async_exec(decoupled=True):
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            tensor = pb_utils.get_output_tensor_by_name(response, "SEEN")
            if tensor is not None:
                seen.append(int(tensor.as_numpy()[0]))
        return seen
