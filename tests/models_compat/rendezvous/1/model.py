"""Decoupled: each request waits (5 s at most) until PARTIES requests of its GROUP have
arrived, then answers how many it saw. Only requests in flight together all see PARTIES."""

import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils

WAIT_S = 5.0


class TritonPythonModel:
    def initialize(self, args):
        self.arrived = {}
        self.changed = None  # an asyncio.Condition, made on the loop that runs execute

    async def execute(self, requests):
        await asyncio.gather(*(self.meet(request) for request in requests))

    async def meet(self, request):
        parties = int(pb_utils.get_input_tensor_by_name(request, "PARTIES").as_numpy()[0])
        group = pb_utils.get_input_tensor_by_name(request, "GROUP").as_numpy()[0]
        if self.changed is None:
            self.changed = asyncio.Condition()
        async with self.changed:
            self.arrived[group] = self.arrived.get(group, 0) + 1
            self.changed.notify_all()
            try:
                await asyncio.wait_for(
                    self.changed.wait_for(lambda: self.arrived[group] >= parties), WAIT_S)
            except asyncio.TimeoutError:
                pass
            seen = self.arrived[group]
        sender = request.get_response_sender()
        seen_tensor = pb_utils.Tensor("SEEN", np.array([seen], np.int32))
        sender.send(pb_utils.InferenceResponse([seen_tensor]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
