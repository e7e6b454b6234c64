"""Async decoupled model making BLS calls: streams add_sub's OUTPUT0 for X, X twice."""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.gather(*(self.serve(r) for r in requests))

    async def serve(self, request):
        sender = request.get_response_sender()
        x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
        calls = [pb_utils.InferenceRequest(
            model_name="add_sub", inputs=[pb_utils.Tensor("INPUT0", x),
                                          pb_utils.Tensor("INPUT1", x * k)],
            requested_output_names=["OUTPUT0"]).async_exec() for k in (1, 2)]
        for answer in await asyncio.gather(*calls):
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", out)]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
