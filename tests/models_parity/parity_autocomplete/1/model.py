"""No config.pbtxt at all: auto_complete_config says everything."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        cfg = auto_complete_model_config
        cfg.set_max_batch_size(4)
        cfg.set_dynamic_batching()
        cfg.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [2]})
        cfg.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]})
        return cfg

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]))
        return responses
