"""A preprocess (Python) -> ONNX -> postprocess (Python) pipeline by BLS.

Each request's TEXT goes to `text_features`, the features to `text_classifier` (an ONNX
graph served by pbserve's built-in ONNX Runtime backend), its probabilities to
`text_labels`. A stage's error is passed on to the client. (The same pipeline as an
ensemble needs no Python in the middle; BLS lets a model choose its next step.)
"""

import triton_python_backend_utils as pb_utils

STAGES = (("text_features", "TEXT", ["FEATURES"]),
          ("text_classifier", "FEATURES", ["PROBS"]),
          ("text_labels", "PROBS", ["LABEL", "SCORE"]))


class TritonPythonModel:
    def execute(self, requests):
        return [self.run(request) for request in requests]

    def run(self, request):
        tensors = [pb_utils.get_input_tensor_by_name(request, "TEXT")]
        for model, input_name, outputs in STAGES:
            answer = pb_utils.InferenceRequest(
                model_name=model, requested_output_names=outputs,
                inputs=[pb_utils.Tensor(input_name, tensors[0].as_numpy())]).exec()
            if answer.has_error():
                return pb_utils.InferenceResponse(error=answer.error())
            tensors = [pb_utils.get_output_tensor_by_name(answer, name) for name in outputs]
        return pb_utils.InferenceResponse(tensors)
