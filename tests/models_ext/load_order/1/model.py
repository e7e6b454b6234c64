"""Writes `<model directory>/begin` and `end` (time.monotonic_ns, a clock all processes
share) around its initialize, which first waits (20 s at most) until `peers` models of
its repository have begun (config parameter, default 1) and then takes 0.3 s: the test
reads whether loads overlapped."""

import glob
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        directory = args["model_repository"]
        config = json.loads(args["model_config"])
        peers = int(config.get("parameters", {}).get("peers", {}).get("string_value", "1"))
        with open(os.path.join(directory, "begin"), "w") as f:
            f.write(str(time.monotonic_ns()))
        deadline = time.monotonic() + 20
        pattern = os.path.join(os.path.dirname(directory), "*", "begin")
        while len(glob.glob(pattern)) < peers and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        with open(os.path.join(directory, "end"), "w") as f:
            f.write(str(time.monotonic_ns()))

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([1], np.int32))])
                for _ in requests]
