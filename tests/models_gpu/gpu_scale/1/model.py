"""Doubles IN on the GPU with cupy and answers with the cupy array itself (DLPack)."""

import cupy
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = int(args["model_instance_device_id"])
        self.kind = args["model_instance_kind"]

    def execute(self, requests):
        responses = []
        with cupy.cuda.Device(self.device):
            for request in requests:
                source = pb_utils.get_input_tensor_by_name(request, "IN")
                doubled = cupy.asarray(source.as_numpy()) * 2
                out = pb_utils.Tensor.from_dlpack("OUT", doubled)
                assert not out.is_cpu() and self.kind == "GPU"
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
