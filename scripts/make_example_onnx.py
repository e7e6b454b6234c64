"""Write models/examples/text_classifier/1/model.onnx: the small network of the
preprocess (Python) -> ONNX -> postprocess (Python) example (README, "ONNX Runtime and
TorchScript models"). Run it again after changing it (`pip install onnx`); the file it
writes is committed, so serving the examples needs only onnxruntime.

FEATURES [batch, 4] (length / 20, vowel, digit and upper-case fractions) -> Gemm ->
Relu -> Gemm -> Softmax -> PROBS [batch, 3] (words, numbers, shouting). The weights are
set by hand so that the answers make sense.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parents[1] / "models" / "examples" / "text_classifier" / "1"

W1 = np.array([[0.5, 0, 0, 0],  # hidden = relu(FEATURES @ W1 + B1)
               [0, 4, 0, 0],
               [0, 0, 6, 0],
               [0, 0, 0, 6]], np.float32)
B1 = np.zeros(4, np.float32)
W2 = np.array([[0.2, 0, 0],     # logits = hidden @ W2 + B2
               [1, 0, 0],
               [0, 1.5, 0],
               [0, 0, 1.5]], np.float32)
B2 = np.array([0.5, 0, 0], np.float32)


def main() -> None:
    batch = "batch"
    nodes = [
        helper.make_node("Gemm", ["FEATURES", "W1", "B1"], ["H"]),
        helper.make_node("Relu", ["H"], ["A"]),
        helper.make_node("Gemm", ["A", "W2", "B2"], ["LOGITS"]),
        helper.make_node("Softmax", ["LOGITS"], ["PROBS"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "text_classifier",
        [helper.make_tensor_value_info("FEATURES", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("PROBS", TensorProto.FLOAT, [batch, 3])],
        initializer=[numpy_helper.from_array(a, n)
                     for a, n in ((W1, "W1"), (B1, "B1"), (W2, "W2"), (B2, "B2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="pbserve scripts/make_example_onnx.py")
    model.ir_version = 8  # readable by onnxruntime 1.16 and later
    onnx.checker.check_model(model)
    OUT.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(OUT / "model.onnx"))
    print(f"wrote {OUT / 'model.onnx'} ({(OUT / 'model.onnx').stat().st_size} bytes)")


if __name__ == "__main__":
    main()
