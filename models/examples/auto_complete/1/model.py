"""A model with no config.pbtxt at all: `auto_complete_config` declares its inputs,
outputs, batching and dynamic batcher, and `Logger` reports what it does.

The completed configuration is what `GET /v2/models/auto_complete/config` shows and
what `initialize(args)["model_config"]` holds. SCORES = softmax(LOGITS) per row.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {"name": "LOGITS", "data_type": "TYPE_FP32", "dims": [-1]})
        auto_complete_model_config.add_output(
            {"name": "SCORES", "data_type": "TYPE_FP32", "dims": [-1]})
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        pb_utils.Logger.log_info(
            f"auto_complete: max_batch_size {config['max_batch_size']}, "
            f"inputs {[i['name'] for i in config['input']]}")

    def execute(self, requests):
        pb_utils.Logger.log_verbose(f"auto_complete: a batch of {len(requests)} requests")
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
            shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
            scores = (shifted / shifted.sum(axis=-1, keepdims=True)).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SCORES", scores)]))
        return responses
