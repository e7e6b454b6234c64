"""Calls the identity example twice a request by BLS: once from the thread that runs
`execute` (the stub's main thread: its answer comes on the main queue) and once from a
thread of the model's own (answered through the stub's control thread); the first
time with a custom metric made in `initialize`, also a blocking call of the main thread."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def _identity(tensor):
    answer = pb_utils.InferenceRequest(
        model_name="identity", inputs=[pb_utils.Tensor("INPUT_FP32", tensor)],
        requested_output_names=["OUTPUT_FP32"]).exec()
    if answer.has_error():
        raise pb_utils.TritonModelException(answer.error().message())
    return pb_utils.get_output_tensor_by_name(answer, "OUTPUT_FP32").as_numpy().copy()


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(name="bls_two_threads_calls",
                                       description="requests served",
                                       kind=pb_utils.MetricFamily.COUNTER)
        self.calls = self.family.Metric(labels={"model": "bls_two_threads"})

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT_FP32").as_numpy()
            box = {}
            worker = threading.Thread(target=lambda: box.update(y=_identity(x * 2)))
            worker.start()
            from_main = _identity(x + 1)
            worker.join()
            self.calls.increment(1)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("FROM_MAIN", from_main),
                pb_utils.Tensor("FROM_WORKER", np.asarray(box["y"], np.float32))]))
        return responses
