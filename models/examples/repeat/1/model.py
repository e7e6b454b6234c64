"""A decoupled model: one response per element of IN, DELAY ms apart, then FINAL.

For a request with IN = [4, 2, 0] it sends three responses (OUT=4 IDX=0, OUT=2 IDX=1,
OUT=0 IDX=2), then the final flag on its own. Each request is answered by its own
thread, so `execute` returns at once and the instance takes the next request while
earlier ones are still sending: that is what decoupled mode allows.
"""

import threading

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()  # set by finalize: cut the delays short

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY")
            delay_s = int(delay.as_numpy()[0]) / 1000 if delay is not None else 0.0
            # The input arrays stay valid until the request's final response.
            thread = threading.Thread(
                target=self.respond, args=(request.get_response_sender(), values, delay_s),
                daemon=True)
            with self.lock:
                self.threads.add(thread)
            thread.start()
        # Decoupled: execute returns None; the responses go through the senders.

    def respond(self, sender, values, delay_s):
        try:
            for idx, value in enumerate(values):
                if sender.is_cancelled():
                    break  # the client went away; FINAL still closes the request
                if self.stopping.wait(delay_s):
                    sender.send(pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("repeat: the model is being unloaded")),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    return
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                    pb_utils.Tensor("IDX", np.array([idx], dtype=np.uint32)),
                ]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            with self.lock:
                self.threads.discard(threading.current_thread())

    def finalize(self):
        self.stopping.set()
        with self.lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join(timeout=5)
