"""The parent's bounded spin for a reply (ModelInstance.await_reply_briefly): answers read
inline by the spin, by the doorbell after it, from a queue, from a failed execute and from
a killed stub are all right, and the count of running instances that decides whether the
parent may spin returns to zero (a leak would silently turn the spin off)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from pbserve.backend.instance import REPLY_SPIN_NS
from pbserve.testing import load_models

MODELS = Path(__file__).resolve().parent / "models"


def sleep_ms(ms: int) -> dict:
    return {"SLEEP_MS": np.array([ms], np.int32)}


def test_every_way_an_answer_comes_back_leaves_no_instance_counted_busy():
    assert REPLY_SPIN_NS < 5_000_000  # the slow request below outlasts the spin
    with load_models(MODELS, models=["sleepy"]) as models:
        pid = int(models.infer("sleepy", sleep_ms(0))["PID"][0])
        for _ in range(50):  # idle server, fast model: read by the spin
            assert int(models.infer("sleepy", sleep_ms(0))["PID"][0]) == pid
        assert int(models.infer("sleepy", sleep_ms(5))["PID"][0]) == pid  # by the doorbell

        results: list = []
        threads = [threading.Thread(target=lambda: results.append(
            models.infer("sleepy", sleep_ms(1)))) for _ in range(6)]
        for t in threads:  # several at once: all but the first wait in the queue
            t.start()
        for t in threads:
            t.join(30)
        assert [int(r["PID"][0]) for r in results] == [pid] * 6

        with pytest.raises(Exception, match="sleep length must be non-negative"):
            models.infer("sleepy", sleep_ms(-1))  # execute raises

        killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
        killer.start()
        with pytest.raises(Exception, match="exited with signal 9"):
            models.infer("sleepy", sleep_ms(3000))
        killer.join()
        restarted = int(models.infer("sleepy", sleep_ms(0))["PID"][0])
        assert restarted != pid
        assert models.manager._running.count == 0
