"""Decoupled iterative sequence: a request asks for N passes; each pass sends one
response (PASS = its number) and reschedules the request; the last one sends FINAL."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.passes = {}

    def execute(self, requests):
        for request in requests:
            corrid = request.correlation_id()
            done = self.passes.get(corrid, 0) + 1
            want = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("PASS", np.array([done], np.int32))]))
            if done < want:
                self.passes[corrid] = done
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            else:
                self.passes.pop(corrid, None)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
