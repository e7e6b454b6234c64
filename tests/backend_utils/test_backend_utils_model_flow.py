"""Unmodified Triton-style model code running against the fake runtime, end to end."""

import json
import threading

import numpy as np

import triton_python_backend_utils as pb_utils
from backend_utils.testing import FakeRuntime, installed


class AddSub:
    """Shape of Triton's examples/add_sub/model.py."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        out = pb_utils.get_output_config_by_name(config, "OUTPUT0")
        self.dtype = pb_utils.triton_string_to_numpy(out["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dtype))
            out1 = pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
        return responses


class Repeat:
    """Shape of Triton's decoupled repeat model: responses sent from a thread."""

    def __init__(self):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()

            def work(values=values, sender=sender):
                for value in values:
                    out = pb_utils.Tensor("OUT", np.array([value]))
                    sender.send(pb_utils.InferenceResponse([out]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

            thread = threading.Thread(target=work)
            thread.start()
            self.threads.append(thread)
        return None


def incoming(inputs, key):
    buffers = [
        pb_utils.Tensor._from_triton(name, "INT32", [4], np.asarray(values, "<i4").tobytes())
        for name, values in inputs.items()
    ]
    return pb_utils.InferenceRequest._incoming(
        inputs=buffers, request_id=str(key), correlation_id=0, flags=0, parameters_json="{}",
        timeout=0, requested_output_names=["OUTPUT0", "OUTPUT1"], model_name="add_sub",
        model_version=1, key=key)


def test_add_sub_model_runs_unmodified():
    model = AddSub()
    model.initialize({"model_config": json.dumps(
        {"output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [4]}]})})
    request = incoming({"INPUT0": [1, 2, 3, 4], "INPUT1": [4, 3, 2, 1]}, key=1)
    [response] = model.execute([request])
    assert response.output_tensors()[0].as_numpy().tolist() == [5, 5, 5, 5]
    assert response.output_tensors()[1]._triton_datatype_name() == "INT32"


def test_decoupled_repeat_model_streams_then_finishes():
    with installed(FakeRuntime(decoupled=True)) as rt:
        request = pb_utils.InferenceRequest._incoming(
            inputs=[pb_utils.Tensor("IN", np.array([7, 8, 9], np.int32))], request_id="",
            correlation_id=0, flags=0, parameters_json="{}", timeout=0,
            requested_output_names=["OUT"], model_name="repeat", model_version=1, key=1)
        model = Repeat()
        assert model.execute([request]) is None
        for thread in model.threads:
            thread.join(timeout=5)
    values = [r.output_tensors()[0].as_numpy()[0] for _, r, f in rt.sent if r is not None]
    assert values == [7, 8, 9]
    assert rt.sent[-1][1:] == (None, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
