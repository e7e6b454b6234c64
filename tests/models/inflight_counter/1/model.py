"""Counts its `async def execute` coroutines in flight, without timing anything.

Each coroutine waits until TARGET coroutines are in flight at once (or gives up after
10 s so that a broken server fails the test instead of hanging it), then answers the
largest number it has seen and its pid.
"""

import asyncio
import os

import numpy as np

import triton_python_backend_utils as pb_utils

GIVE_UP_S = 10.0


class TritonPythonModel:
    def initialize(self, args):
        self.inflight = 0
        self.max_inflight = 0
        self.changed = None  # an asyncio.Condition, made on the stub's event loop

    async def execute(self, requests):
        if self.changed is None:
            self.changed = asyncio.Condition()
        for request in requests:
            target = int(pb_utils.get_input_tensor_by_name(request, "TARGET").as_numpy()[0])
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
            try:
                async with self.changed:
                    self.changed.notify_all()
                    try:
                        await asyncio.wait_for(
                            self.changed.wait_for(lambda t=target: self.max_inflight >= t),
                            GIVE_UP_S)
                    except asyncio.TimeoutError:
                        pass
            finally:
                self.inflight -= 1
            request.get_response_sender().send(
                pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("MAX_INFLIGHT", np.array([self.max_inflight], np.int32)),
                    pb_utils.Tensor("PID", np.array([os.getpid()], np.int64))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
