"""Waiting, bounded, for something a server does in the background."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Poll `predicate` every 10 ms; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
