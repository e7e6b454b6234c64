"""An event loop stand-in whose clock and timers a test moves by hand (batcher tests)."""

from __future__ import annotations


class FakeLoop:
    """Loop time and timers the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback):
        loop = self

        class Handle:
            def when(self) -> float:
                return when

            def cancel(self) -> None:
                if entry in loop.timers:
                    loop.timers.remove(entry)

        entry = (when, callback, Handle())
        self.timers.append(entry)
        return entry[2]

    def call_later(self, delay: float, callback):
        return self.call_at(self.now + delay, callback)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for entry in sorted((t for t in self.timers if t[0] <= self.now), key=lambda t: t[0]):
            if entry in self.timers:
                self.timers.remove(entry)
                entry[1]()
