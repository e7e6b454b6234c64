"""pbserve.testing.load_models: a user's model.py under test without a server."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pbserve.errors import ErrorCode, ServerError
from pbserve.testing import load_models

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"


def test_load_models_infers_and_streams_with_real_stubs():
    a = np.arange(16, dtype=np.float32)
    with load_models(EXAMPLES, models=["add_sub", "repeat", "identity"]) as models:
        out = models.infer("add_sub", {"INPUT0": a, "INPUT1": a})
        np.testing.assert_array_equal(out["OUTPUT0"], a + a)
        texts = np.array([b"x", b"\xff"], dtype=np.object_)
        assert list(models.infer("identity", {"INPUT_STRING": texts})["OUTPUT_STRING"]) == \
            [b"x", b"\xff"]
        responses = models.stream("repeat", {"IN": np.array([3, 1], np.int32)})
        assert [int(r["OUT"][0]) for r in responses if r] == [3, 1]
        assert responses[-1] == {}
        with pytest.raises(ServerError) as err:
            models.infer("add_sub", {"INPUT0": a})
        assert err.value.code == ErrorCode.INVALID_ARG and "INPUT1" in err.value.message


def test_auto_complete_example_has_no_config_file_and_batches():
    logits = np.array([[0.0, 0.0], [1.0, 3.0]], dtype=np.float32)
    with load_models(EXAMPLES, models=["auto_complete"]) as models:
        config = models.manager.model_config("auto_complete")
        assert config["max_batch_size"] == 8 and "dynamic_batching" in config
        scores = models.infer("auto_complete", {"LOGITS": logits})["SCORES"]
    np.testing.assert_allclose(scores.sum(axis=1), [1.0, 1.0], rtol=1e-6)
    assert scores[0, 0] == pytest.approx(0.5) and scores[1, 1] > scores[1, 0]
