"""Logs one line at each pb_utils.Logger level, tagged with the request's MARK."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.Logger.log_verbose("log_probe verbose in initialize")
        pb_utils.Logger.log_info("log_probe info in initialize")

    def execute(self, requests):
        responses = []
        for request in requests:
            mark = pb_utils.get_input_tensor_by_name(request, "MARK").as_numpy()[0].decode()
            pb_utils.Logger.log_verbose(f"verbose {mark}")
            pb_utils.Logger.log_info(f"info {mark}")
            pb_utils.Logger.log_warn(f"warning {mark}")
            pb_utils.Logger.log_error(f"error {mark}")
            out = pb_utils.Tensor("MARK_OUT", np.array([mark.encode()], dtype=object))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
