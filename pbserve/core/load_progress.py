"""Progress of the start-up loads, in the log: while loading the repository takes more
than a couple of seconds, a line every few seconds says how many models are loaded, the
slowest so far, and the one loading longest now; a last line says when all are done.
A quick start logs none of it (each model's own "successfully loaded" line stays).
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("pbserve.core")

FIRST_AFTER_S = 2.0  # no progress line for a start-up quicker than this
EVERY_S = 5.0  # then one line this often


class LoadProgress:
    """Follows `total` start-up loads; `begin(name)` and `end(name)` around each,
    `close()` after the last. Runs on the event loop."""

    def __init__(self, total: int, first_after_s: float = FIRST_AFTER_S,
                 every_s: float = EVERY_S) -> None:
        self.total = total
        self.done = 0
        self._every_s = every_s
        self._started = time.monotonic()
        self._loading: dict[str, float] = {}  # name -> when its load began
        self._slowest: tuple[str, float] | None = None  # (name, seconds) of those done
        self._reported = False
        self._timer: asyncio.TimerHandle | None = None
        if total > 0:
            self._timer = asyncio.get_running_loop().call_later(first_after_s, self._report)

    def begin(self, name: str) -> None:
        self._loading[name] = time.monotonic()

    def end(self, name: str) -> None:
        began = self._loading.pop(name, None)
        self.done += 1
        if began is not None:
            took = time.monotonic() - began
            if self._slowest is None or took > self._slowest[1]:
                self._slowest = (name, took)

    def close(self) -> None:
        """All loads ended: the last line, if progress was reported."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._reported:
            log.info("%d of %d models loaded in %.1f s%s", self.done, self.total,
                     time.monotonic() - self._started, self._slowest_text("slowest"))

    def _report(self) -> None:
        self._reported = True
        now = time.monotonic()
        text = f"{self.done} of {self.total} models loaded ({now - self._started:.0f} s)"
        text += self._slowest_text("slowest so far")
        if self._loading:
            name, began = min(self._loading.items(), key=lambda item: item[1])
            text += f"; '{name}' loading for {now - began:.1f} s"
            if len(self._loading) > 1:
                text += f" (and {len(self._loading) - 1} more loading)"
        log.info("%s", text)
        self._timer = asyncio.get_running_loop().call_later(self._every_s, self._report)

    def _slowest_text(self, label: str) -> str:
        if self._slowest is None:
            return ""
        name, took = self._slowest
        return f"; {label} '{name}' ({took:.1f} s)"
