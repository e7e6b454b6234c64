"""One line at each pb_utils.Logger level, tagged with the request's TOKEN."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        logger = pb_utils.Logger
        responses = []
        for request in requests:
            token = pb_utils.get_input_tensor_by_name(request, "TOKEN").as_numpy()[0].decode()
            logger.log_info(f"parity-info-{token}")
            logger.log_warn(f"parity-warn-{token}")
            logger.log_error(f"parity-error-{token}")
            logger.log_verbose(f"parity-verbose-{token}")
            logger.log(f"parity-log-{token}", logger.WARNING)
            out = pb_utils.Tensor("OK", np.array([True]))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
