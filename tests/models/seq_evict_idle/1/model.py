"""Keeps a note per sequence and frees it on pbserve's eviction notice.

Every request names a file in its parameter "log"; `sequence_terminated` appends
"<correlation id> <reason>" to the file its sequence named ("... without state" when the
sequence had already ended: a notice that should not have come). A request with the parameter
"wait_cancel" first writes "<log>.running", then waits (at most 30 s) to be cancelled.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.notes = {}  # correlation id -> state of a live sequence
        self.logs = {}  # correlation id -> its log file, kept after the end

    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            corrid = request.correlation_id()
            self.notes[corrid] = self.logs[corrid] = params["log"]
            if params.get("wait_cancel"):
                with open(params["log"] + ".running", "w"):
                    pass
                deadline = time.monotonic() + 30
                while not request.is_cancelled() and time.monotonic() < deadline:
                    time.sleep(0.005)
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                del self.notes[corrid]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array([len(self.notes)], np.int32))]))
        return responses

    def sequence_terminated(self, correlation_id, reason):
        state = self.notes.pop(correlation_id, None)
        with open(self.logs[correlation_id], "a") as log:
            log.write(f"{correlation_id} {reason}{'' if state else ' without state'}\n")
