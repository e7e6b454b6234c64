"""B -> C: passes X to the identity example (C) and answers its output times two."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            answer = pb_utils.InferenceRequest(
                model_name="identity", inputs=[pb_utils.Tensor("INPUT_FP32", x)],
                requested_output_names=["OUTPUT_FP32"]).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            y = pb_utils.get_output_tensor_by_name(answer, "OUTPUT_FP32").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y * 2)]))
        return responses
