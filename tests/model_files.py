"""Files of model repositories the backend tests write: a config or model.py
(`write`), an ONNX graph (`save_graph`, needs the onnx package)."""

from __future__ import annotations

import textwrap
from pathlib import Path


# A Python model answering Y = 2 X for each request, and the inputs and outputs of its
# config (FP32 [4], batches of up to 8): the frontend tests' batched model.
DOUBLE_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)])
            for r in requests]
"""
DOUBLE_IO = ('max_batch_size: 8\n'
             'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
             'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def save_graph(path: Path, nodes, inputs, outputs, initializers=()) -> None:
    """An ONNX graph (opset 17) of `nodes`, named after the model's folder; `inputs` and
    `outputs` as (name, element type, shape)."""
    import onnx
    from onnx import helper

    graph = helper.make_graph(
        nodes, path.parent.parent.name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
