"""Preprocess -> `add_sub` and `identity` in parallel -> merge.

INPUT is centred (x - mean), sent to `add_sub` (as INPUT0 and INPUT1, so OUTPUT0 = 2x)
and to `identity` (x) at the same time with `async_exec` and `asyncio.gather`; OUTPUT is
the sum of both answers, 3 * (x - mean). A callee's error comes back as a response with
`has_error()`, which this model passes on to its client.
"""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        return await asyncio.gather(*(self.run(request) for request in requests))

    async def run(self, request):
        x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
        centred = x - x.mean()
        add_sub = pb_utils.InferenceRequest(
            model_name="add_sub",
            inputs=[pb_utils.Tensor("INPUT0", centred), pb_utils.Tensor("INPUT1", centred)],
            requested_output_names=["OUTPUT0"])
        identity = pb_utils.InferenceRequest(
            model_name="identity", inputs=[pb_utils.Tensor("INPUT_FP32", centred)],
            requested_output_names=["OUTPUT_FP32"])
        doubled, same = await asyncio.gather(add_sub.async_exec(), identity.async_exec())
        for answer in (doubled, same):
            if answer.has_error():
                return pb_utils.InferenceResponse(error=answer.error())
        merged = (pb_utils.get_output_tensor_by_name(doubled, "OUTPUT0").as_numpy()
                  + pb_utils.get_output_tensor_by_name(same, "OUTPUT_FP32").as_numpy())
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", merged)])
