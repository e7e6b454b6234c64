"""Model control from inside a model: OP on model NAME, RESULT as text."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils

TARGET_CONFIG = {
    "name": "parity_target", "backend": "python", "max_batch_size": 0,
    "input": [{"name": "DUMMY", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "WHO", "data_type": "TYPE_STRING", "dims": [1]}],
    "parameters": {"who": {"string_value": "configured-by-parity_control"}},
}
FILES_MODEL = b"""
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = pb_utils.Tensor("WHO", np.array([b"loaded-from-files"], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""


def run(op, name):
    if op == "load":
        pb_utils.load_model(name)
    elif op == "load_config":
        pb_utils.load_model(model_name=name, config=json.dumps(TARGET_CONFIG))
    elif op == "load_files":
        pb_utils.load_model(name, config=json.dumps(dict(TARGET_CONFIG, name=name)),
                            files={"file:1/model.py": FILES_MODEL})
    elif op == "unload":
        pb_utils.unload_model(name)
    elif op == "ready":
        return str(pb_utils.is_model_ready(name))
    elif op == "ready_v1":
        return str(pb_utils.is_model_ready(name, "1"))
    elif op == "ready_v7":
        return str(pb_utils.is_model_ready(model_name=name, model_version="7"))
    else:
        raise ValueError(f"unknown OP {op}")
    return "ok"


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            op = pb_utils.get_input_tensor_by_name(request, "OP").as_numpy()[0].decode()
            name = pb_utils.get_input_tensor_by_name(request, "NAME").as_numpy()[0].decode()
            try:
                result = run(op, name)
            except pb_utils.TritonModelException as exc:
                result = f"TritonModelException: {exc}"
            out = pb_utils.Tensor("RESULT", np.array([result.encode()], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
