"""BLS calls to models another worker serves (tests/distributed/test_distributed.py).

MODE picks the call: "sync" (exec) and "async" (async_exec) ask add_sub for X + X;
"decoupled" streams repeat over X; "cancel" cancels a long repeat stream after its first
response; "missing" calls a model nobody serves; "misuse" calls the decoupled repeat
without decoupled=True; "identity" sends X (any length) to identity and back; "probe:PATH" calls cancel_probe (which waits to be cancelled and
writes what it saw to PATH), "doomed:PATH" the same of doomed_probe; "ready" asks `is_model_ready` of add_sub and of a model
nobody serves. Y is what came back, INFO (JSON) the count and errors seen.
"""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


def _tensor(answer, name):
    tensor = pb_utils.get_output_tensor_by_name(answer, name)
    return None if tensor is None else tensor.as_numpy()


class TritonPythonModel:
    async def execute(self, requests):
        return [await self.serve(request) for request in requests]

    async def serve(self, request):
        mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
        x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
        info = {"errors": [], "responses": 0}
        values = []
        if mode == "ready":
            info["ready"] = [pb_utils.is_model_ready("add_sub"),
                             pb_utils.is_model_ready("not_served_anywhere")]
            answers = []
        elif mode.startswith(("probe:", "doomed:")):
            target, path = mode.split(":", 1)
            marker = np.array([path.encode()], dtype=object)
            answers = [pb_utils.InferenceRequest(
                model_name="cancel_probe" if target == "probe" else "doomed_probe",
                inputs=[pb_utils.Tensor("MARKER", marker)],
                requested_output_names=["SEEN"]).exec()]
        elif mode in ("sync", "async", "missing"):
            call = pb_utils.InferenceRequest(
                model_name="not_served_anywhere" if mode == "missing" else "add_sub",
                inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)],
                requested_output_names=["OUTPUT0"])
            answers = [call.exec() if mode != "async" else await call.async_exec()]
        elif mode == "identity":
            answers = [pb_utils.InferenceRequest(
                model_name="identity", inputs=[pb_utils.Tensor("INPUT_FP32", x)],
                requested_output_names=["OUTPUT_FP32"]).exec()]
        elif mode == "misuse":
            call = pb_utils.InferenceRequest(
                model_name="repeat", inputs=[pb_utils.Tensor("IN", x.astype(np.int32))],
                requested_output_names=["OUT"])
            answers = [call.exec()]
        else:
            count = len(x) if mode == "decoupled" else 200
            inputs = [pb_utils.Tensor("IN", np.arange(count, dtype=np.int32)),
                      pb_utils.Tensor("DELAY", np.array([0 if mode == "decoupled" else 50],
                                                        np.uint32))]
            answers = pb_utils.InferenceRequest(
                model_name="repeat", inputs=inputs,
                requested_output_names=["OUT", "IDX"]).exec(decoupled=True)
            if mode == "cancel":
                answers = self.cancel_after_first(answers)
        for answer in answers:
            info["responses"] += 1
            if answer.has_error():
                info["errors"].append(answer.error().message())
                continue
            for name in ("OUTPUT0", "OUT", "OUTPUT_FP32"):
                out = _tensor(answer, name)
                if out is not None:
                    values.extend(out.astype(np.float32).tolist())
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("Y", np.array(values, dtype=np.float32)),
            pb_utils.Tensor("INFO", np.array([json.dumps(info).encode()], dtype=object))])

    @staticmethod
    def cancel_after_first(iterator):
        for index, answer in enumerate(iterator):
            yield answer
            if index == 0:
                iterator.cancel()
