"""Its warmup announces itself (the file `warming` in the model's directory) and then
waits for the file `gate` there; requests after it answer at once."""

import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.dir = args["model_repository"]
        self.warmed = False

    def execute(self, requests):
        if not self.warmed:
            open(os.path.join(self.dir, "warming"), "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(self.dir, "gate")):
                if time.monotonic() > deadline:
                    raise RuntimeError("the test never opened the gate")
                time.sleep(0.01)
            self.warmed = True
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", np.array([1], np.int32))]) for _ in requests]
