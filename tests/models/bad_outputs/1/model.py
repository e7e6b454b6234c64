"""With BAD, answers as a broken stub would: a response whose output names a shared
memory region that does not exist (sent under the runtime, past pb_utils). Else OUT=1,
after a LOG message missing its fields when the request parameter `malformed` is set."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from backend_utils._runtime import get_runtime
from stub import protocol as p

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            if bool(pb_utils.get_input_tensor_by_name(request, "BAD").as_numpy()[0]):
                bogus = p.response_record(
                    None, (("OUT", "FP32", (1,), "pbserve-no-such-region-p0", 0, 4),), "{}")
                get_runtime()._stub.send(p.send(request._key, bogus, FINAL))
            else:
                if json.loads(request.parameters()).get("malformed"):
                    get_runtime()._stub.send((p.LOG,))
                out = pb_utils.Tensor("OUT", np.ones(1, np.float32))
                request.get_response_sender().send(
                    pb_utils.InferenceResponse(output_tensors=[out]), flags=FINAL)
        return None
