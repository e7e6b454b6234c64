"""Triples IN with torch on the GPU: the input crosses to torch and back by DLPack."""

import torch
import triton_python_backend_utils as pb_utils
from torch.utils.dlpack import from_dlpack, to_dlpack


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda", int(args["model_instance_device_id"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            source = from_dlpack(pb_utils.get_input_tensor_by_name(request, "IN").to_dlpack())
            tripled = source.to(self.device) * 3
            out = pb_utils.Tensor.from_dlpack("OUT", to_dlpack(tripled))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
