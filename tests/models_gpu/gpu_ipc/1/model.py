"""IN + 1 on the GPU (cupy, or torch with the request parameter framework=torch), sent to
gpu_pass by BLS with the preferred memory the parameter `memory` names (GPU, CPU, or
none), and checked on the device against what came back. OUT is the BLS output as it
came; OUT_ON_GPU says where it came; CALLEE_SAW_GPU where gpu_pass saw its input. gpu_pass's
ON_GPU, made on the CPU, must come on the GPU with preferred memory GPU (as Triton's
allocator places every output there), else on the CPU."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if params.get("framework") == "torch":
                import torch
                plus_one = torch.from_numpy(data).cuda() + 1
            else:
                import cupy
                plus_one = cupy.asarray(data) + 1
            memory = {"GPU": pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, 0),
                      "CPU": pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)}
            kwargs = {}
            if params.get("memory") in memory:
                kwargs["preferred_memory"] = memory[params["memory"]]
            call = pb_utils.InferenceRequest(
                model_name="gpu_pass", requested_output_names=["OUT", "ON_GPU"],
                inputs=[pb_utils.Tensor.from_dlpack("IN", plus_one)], **kwargs)
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUT")
            saw = pb_utils.get_output_tensor_by_name(answer, "ON_GPU")  # made on the CPU
            if saw.is_cpu() == (params.get("memory") == "GPU"):  # as Triton's allocator
                raise pb_utils.TritonModelException(
                    f"a CPU output arrived {'on the CPU' if saw.is_cpu() else 'on the GPU'} "
                    f"with preferred memory {params.get('memory')}")
            saw = saw.as_numpy() if saw.is_cpu() else _to_host(saw, params.get("framework"))
            if not out.is_cpu():  # compare on the device, in the model's framework
                if params.get("framework") == "torch":
                    import torch
                    same = bool(torch.equal(torch.from_dlpack(out.to_dlpack()), plus_one))
                else:
                    import cupy
                    same = bool(cupy.array_equal(cupy.from_dlpack(out.to_dlpack()), plus_one))
                if not same:
                    raise pb_utils.TritonModelException("the GPU output differs on the device")
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor.from_dlpack("OUT", out.to_dlpack()),
                pb_utils.Tensor("OUT_ON_GPU", np.array([not out.is_cpu()])),
                pb_utils.Tensor("CALLEE_SAW_GPU", saw.copy())]))
        return responses


def _to_host(tensor, framework):
    """A GPU tensor's values on the host, through the model's framework."""
    if framework == "torch":
        import torch
        return torch.from_dlpack(tensor.to_dlpack()).cpu().numpy()
    import cupy
    return cupy.asnumpy(cupy.from_dlpack(tensor.to_dlpack()))
