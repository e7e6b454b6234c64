"""Answers with the response parameters of its PARAMS input (JSON; keys made of digits
become ints); the error of a refused one is the response's INVALID_ARG error."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(
                pb_utils.get_input_tensor_by_name(request, "PARAMS").as_numpy()[0])
            if isinstance(params, dict):
                params = {int(k) if k.isdigit() else k: v for k, v in params.items()}
            out = pb_utils.Tensor("OUT", np.array([len(params)], np.int32))
            try:
                responses.append(pb_utils.InferenceResponse([out], parameters=params))
            except Exception as exc:
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
        return responses
