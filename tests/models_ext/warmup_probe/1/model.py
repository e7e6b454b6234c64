"""Records every batch it executes; a request whose first TEXT is b"report" answers
with the record (as JSON) of the batches before it."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.batches = []

    def execute(self, requests):
        seen = []
        for request in requests:
            tensors = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                       for name in ("IN", "TEXT", "RAW")}
            seen.append({
                "shape": list(tensors["IN"].shape),
                "in": tensors["IN"].tolist(),
                "text": [[t.decode() for t in row] for row in tensors["TEXT"]],
                "raw": tensors["RAW"].tolist(),
            })
        report = json.dumps(self.batches)
        self.batches.append(seen)
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "SEEN", np.array([[report.encode()]], dtype=object))]) for _ in requests]
