"""A batching test model whose batches a test can hold and watch (HELD: its config's
parameters "hold" and "seen" name the files), and its input (`held_x`): the frontend
processes' batcher tests (tests/frontends/test_batched_answers.py, test_stub_batcher.py)."""

from __future__ import annotations

import numpy as np
import tritonclient.http as httpclient

# Doubles X. A batch writes its size into the file "seen", then waits while the file
# "hold" exists; a batch holding a negative X raises.
HELD = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.hold = params["hold"]["string_value"]
        self.seen = params["seen"]["string_value"]

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        with open(self.seen, "a") as f:
            f.write(f"{len(requests)}\\n")
        while os.path.exists(self.hold):
            time.sleep(0.01)
        if any((x < 0).any() for x in xs):
            raise ValueError("a negative X")
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("Y", x * 2), pb_utils.Tensor("PID", np.array([os.getpid()]))])
            for x in xs]
"""


def held_x(value: float) -> list:
    """HELD's input: X of shape [1, 4], every element `value`."""
    tensor = httpclient.InferInput("X", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, np.float32))
    return [tensor]


def answered_by_another_stub(client, pid: int) -> bool:
    """Whether HELD, asked through `client`, is answered by a stub other than `pid` (a
    killed stub's successor); False while none answers (it is restarting)."""
    try:
        return int(client.infer("held", held_x(2.0)).as_numpy("PID")[0]) != pid
    except Exception:  # noqa: BLE001 - restarting
        return False
