"""What a server's stubs are doing, seen from /proc (the tests that kill a worker while
a request sleeps in its model's execute)."""

from __future__ import annotations

import contextlib

from pbserve.testing import stub_pids


def sleeping_in_execute(server_pid: int, model: str = "") -> bool:
    """Whether a stub of the server (of `model`'s instances, if named) sleeps in a timed
    sleep now: the `sleepy` test model in its execute."""
    for pid in stub_pids(server_pid):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            if model:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if model.encode() not in f.read():
                        continue
            with open(f"/proc/{pid}/wchan") as f:
                if f.read() == "hrtimer_nanosleep":
                    return True
    return False
