"""A message from a stub that the parent cannot take in fails the request it answers with
INTERNAL (a response naming a shared memory region that does not exist), or is only
logged (a message of another kind); nothing else is harmed: the same instance serves the
next request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pbserve.errors import ErrorCode, ServerError
from pbserve.testing import load_models

MODELS = Path(__file__).parents[1] / "models"


def test_an_unreadable_response_fails_its_request_and_the_instance_goes_on():
    with load_models(MODELS, models=["bad_outputs"]) as models:
        with pytest.raises(ServerError, match="could not be read") as info:
            models.stream("bad_outputs", {"BAD": np.array([True])})
        assert info.value.code is ErrorCode.INTERNAL
        for _ in range(2):
            [good, *_] = models.stream("bad_outputs", {"BAD": np.array([False])})
            np.testing.assert_array_equal(good["OUT"], [1.0])


def test_a_malformed_message_of_another_kind_is_logged_and_harms_nothing(caplog):
    with load_models(MODELS, models=["bad_outputs"]) as models:
        [good, *_] = models.stream("bad_outputs", {"BAD": np.array([False])},
                                   parameters={"malformed": True})
        np.testing.assert_array_equal(good["OUT"], [1.0])
        [again, *_] = models.stream("bad_outputs", {"BAD": np.array([False])})
        np.testing.assert_array_equal(again["OUT"], [1.0])
    assert "a message from its stub (kind 106) could not be handled" in caplog.text
