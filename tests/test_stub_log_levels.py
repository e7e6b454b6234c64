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
    stub.log_levels.update(1, True, True, True)
    assert _levels_sent(stub) == list(LogLevel)
    stub.log_levels.update(0, False, True, False)
    assert _levels_sent(stub) == [LogLevel.WARNING]


def test_the_environment_gives_the_first_verbose_level(monkeypatch):
    monkeypatch.setenv("PBSERVE_LOG_VERBOSE", "2")
    assert LogLevels().verbose_level == 2
    monkeypatch.setenv("PBSERVE_LOG_VERBOSE", "x")
    assert LogLevels().verbose_level == 0
