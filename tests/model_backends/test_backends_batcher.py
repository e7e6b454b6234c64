"""pbserve/model_backends/common.py: how the built-in backends batch the requests of one
`execute` (unit tests, no process: backend_utils.testing's FakeRuntime)."""

from __future__ import annotations

import numpy as np
import pytest

import triton_python_backend_utils as pb_utils
from backend_utils.testing import FakeRuntime, installed
from pbserve.model_backends.common import Batcher, compare_dims

CONFIG = {"max_batch_size": 8,
          "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1]}],
          "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]},
                     {"name": "N", "data_type": "TYPE_INT64", "dims": [1]}]}


def request(x: np.ndarray, outputs=()):
    return pb_utils.InferenceRequest(model_name="m", inputs=[pb_utils.Tensor("X", x)],
                                     requested_output_names=list(outputs))


def test_requests_of_one_shape_run_together_others_apart() -> None:
    calls = []

    def run(inputs, names):
        x = inputs["X"]
        calls.append((x.shape, names))
        return {"Y": x * 2, "N": np.full((x.shape[0], 1), x.shape[0], np.int64)}

    with installed(FakeRuntime()):
        batcher = Batcher(CONFIG, run)
        a, b = np.ones((2, 3), np.float32), np.full((1, 3), 5, np.float32)
        c = np.ones((1, 4), np.float32)
        out = batcher.execute([request(a), request(c, ["N"]), request(b, ["Y"])])
    assert sorted(calls) == [((1, 4), ["N"]), ((3, 3), ["Y", "N"])]
    y = pb_utils.get_output_tensor_by_name(out[0], "Y").as_numpy()
    np.testing.assert_array_equal(y, a * 2)
    assert pb_utils.get_output_tensor_by_name(out[0], "N").as_numpy().tolist() == [[3], [3]]
    assert pb_utils.get_output_tensor_by_name(out[1], "Y") is None
    np.testing.assert_array_equal(
        pb_utils.get_output_tensor_by_name(out[2], "Y").as_numpy(), b * 2)
    assert pb_utils.get_output_tensor_by_name(out[2], "N") is None


def test_an_error_fails_only_its_batch() -> None:
    def run(inputs, names):
        if inputs["X"].shape[1] == 4:
            raise RuntimeError("no")
        return {"Y": inputs["X"], "N": np.zeros((inputs["X"].shape[0], 1), np.int64)}

    with installed(FakeRuntime()):
        out = Batcher(CONFIG, run).execute([request(np.ones((1, 4), np.float32)),
                                            request(np.ones((1, 3), np.float32))])
    assert out[0].has_error() and out[0].error().message() == "no"
    assert not out[1].has_error()


def test_an_output_without_the_batch_dimension_is_an_error() -> None:
    with installed(FakeRuntime()):
        out = Batcher(CONFIG, lambda inputs, names: {"Y": np.ones(3), "N": np.ones(3)}
                      ).execute([request(np.ones((2, 3), np.float32))])
    assert "its first dimension must be the batch" in out[0].error().message()


def test_without_max_batch_size_each_request_runs_alone() -> None:
    config = dict(CONFIG, max_batch_size=0)
    calls = []
    with installed(FakeRuntime()):
        Batcher(config, lambda inputs, names: calls.append(1) or {
            "Y": inputs["X"], "N": np.zeros(1, np.int64)}).execute(
                [request(np.ones(3, np.float32)), request(np.ones(3, np.float32))])
    assert len(calls) == 2


def test_compare_dims_in_tritons_words() -> None:
    compare_dims("m", "X", [-1, 4], [4], 8)
    compare_dims("m", "X", [2, -1], [2, 7], 0)
    with pytest.raises(ValueError, match=r"^model 'm', tensor 'X': for the model to support "
                       r"batching the shape should have at least 1 dimension and the first "
                       r"dimension must be -1; but shape expected by the model is \[2,4\]$"):
        compare_dims("m", "X", [2, 4], [4], 8)
    with pytest.raises(ValueError, match=r"the model expects 2 dimensions \(shape \[2,4\]\) but "
                       r"the model configuration specifies 1 dimensions \(shape \[8\]\)$"):
        compare_dims("m", "X", [2, 4], [8], 0)
