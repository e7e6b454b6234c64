"""Iterative sequence: a request asks for N passes; every execute() call is one pass
and the request is rescheduled until it had N. Answers the passes, the correlation id
the batcher gave it and the flags of its first and last pass."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.passes = {}  # correlation id -> (passes so far, flags of the first)

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = request.correlation_id()
            done, first = self.passes.get(corrid, (0, request.flags()))
            done += 1
            want = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy().reshape(-1)[0])
            if done < want:
                self.passes[corrid] = (done, first)
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            self.passes.pop(corrid, None)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("PASSES", np.array([[done]], np.int32)),
                pb_utils.Tensor("CORRID", np.array([[int(corrid)]], np.uint64)),
                pb_utils.Tensor("FLAGS", np.array([[first, request.flags()]], np.int32)),
                pb_utils.Tensor("BATCH", np.array([[len(requests)]], np.int32)),
            ]))
        return responses
