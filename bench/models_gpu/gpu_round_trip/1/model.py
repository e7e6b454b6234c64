"""Times a device tensor of MIB MiB passed from here (A) to another model (B) and back
to A on the GPU, per request parameter `path`:
- "ipc": to gpu_pass (GPU inputs) by CUDA IPC, back as B's GPU output;
- "host": to gpu_pass_cpu (CPU inputs) with CPU outputs preferred, back to the device
  with cupy (the round trip through host memory);
- "memcpy": one device-to-device copy of the tensor (the yardstick).
SECONDS: each of `repeat` (parameter) timed runs, after a warm-up run; each run checks
the tensor came back bit-exact."""

import json
import time

import cupy
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            mib = int(pb_utils.get_input_tensor_by_name(request, "MIB").as_numpy()[0])
            data = cupy.arange(mib << 18, dtype=cupy.float32)
            runs = [self._once(params["path"], data) for _ in range(int(params["repeat"]) + 1)]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SECONDS", np.array(runs[1:], np.float64))]))
        return responses

    def _once(self, path, data):
        cupy.cuda.runtime.deviceSynchronize()
        start = time.perf_counter()
        if path == "memcpy":
            back = data.copy()
        else:
            model, memory = ("gpu_pass", None) if path == "ipc" else (
                "gpu_pass_cpu", pb_utils.TRITONSERVER_MEMORY_CPU)
            kwargs = {} if memory is None else {
                "preferred_memory": pb_utils.PreferredMemory(memory, 0)}
            answer = pb_utils.InferenceRequest(
                model_name=model, requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor.from_dlpack("IN", data)], **kwargs).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUT")
            back = cupy.from_dlpack(out.to_dlpack()) if not out.is_cpu() \
                else cupy.asarray(out.as_numpy())
        cupy.cuda.runtime.deviceSynchronize()
        seconds = time.perf_counter() - start
        if not bool(cupy.array_equal(back, data)):
            raise pb_utils.TritonModelException(f"{path}: the tensor came back changed")
        return seconds
