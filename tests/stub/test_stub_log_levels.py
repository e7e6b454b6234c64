"""The stub drops pb_utils.Logger lines of levels the server's log settings turn off,
before they cost a message to the parent."""

from __future__ import annotations

from backend_utils.logger import LogLevel
from stub import protocol as p
from stub.log_levels import LogLevels
from stub.runtime import StubRuntime


class _Stub:
    def __init__(self) -> None:
        self.log_levels = LogLevels()
        self.sent: list[tuple] = []

    def send(self, message: tuple) -> None:
        self.sent.append(message)


def _levels_sent(stub: _Stub) -> list[int]:
    runtime = StubRuntime(stub, decoupled=False)
    stub.sent.clear()
    for level in LogLevel:
        runtime.log(int(level), "line", "model.py", 1)
    return [m[1] for m in stub.sent if m[0] == p.LOG]


def test_settings_decide_which_levels_are_sent(monkeypatch):
    monkeypatch.setenv("PBSERVE_LOG_VERBOSE", "0")
    stub = _Stub()
    assert _levels_sent(stub) == [LogLevel.INFO, LogLevel.WARNING, LogLevel.ERROR]
    stub.log_levels.update(1, 1, True, True, True)
    assert _levels_sent(stub) == list(LogLevel)
    stub.log_levels.update(2, 0, False, True, False)
    assert _levels_sent(stub) == [LogLevel.WARNING]


def test_a_copy_older_than_the_settings_applied_is_ignored(monkeypatch):
    """A change comes on both queues, in either order: the later copy of an older change
    must not undo a newer one."""
    monkeypatch.setenv("PBSERVE_LOG_VERBOSE", "0")
    stub = _Stub()
    stub.log_levels.update(1, 1, True, True, True)
    stub.log_levels.update(2, 0, False, True, False)
    stub.log_levels.update(1, 1, True, True, True)  # change 1's other copy, late
    assert _levels_sent(stub) == [LogLevel.WARNING]
    stub.log_levels.update(2, 0, False, True, False)  # change 2's other copy: the same
    assert _levels_sent(stub) == [LogLevel.WARNING]


def test_the_environment_gives_the_first_verbose_level(monkeypatch):
    monkeypatch.setenv("PBSERVE_LOG_VERBOSE", "2")
    assert LogLevels().verbose_level == 2
    monkeypatch.setenv("PBSERVE_LOG_VERBOSE", "x")
    assert LogLevels().verbose_level == 0
