"""Which `pb_utils.Logger` levels a stub sends to its parent (Triton's log settings).

The parent sends `(LOG_SETTINGS, generation, verbose_level, info, warning, error)` before
the model is imported and again whenever a client changes the settings (`/v2/logging`),
on the control queue (applied at once, even during `execute`) and on the main queue too
(so the requests sent after the change run with it); the two copies may arrive in either
order, so one older than what was applied is ignored. A line of a level that is off is
dropped in the stub, before it costs a message.
"""

from __future__ import annotations

import os
import threading

from backend_utils.logger import VERBOSE_ENV, LogLevel


class LogLevels:
    def __init__(self) -> None:
        try:
            self.verbose_level = int(os.environ.get(VERBOSE_ENV, "0"))
        except ValueError:
            self.verbose_level = 0
        self.info = self.warning = self.error = True
        self.generation = -1  # of the settings applied
        # The main loop and the control thread both apply copies: the check of the
        # generation and the settings it admits go together.
        self._lock = threading.Lock()

    def update(self, generation: int, verbose_level: int, info: bool, warning: bool,
               error: bool) -> None:
        with self._lock:
            if generation < self.generation:
                return  # the other queue's copy of a newer change came first
            self.generation = generation
            self.verbose_level = verbose_level
            self.info, self.warning, self.error = info, warning, error
            # Logger lines outside a runtime (auto_complete_config) read the variable
            os.environ[VERBOSE_ENV] = str(verbose_level)

    def enabled(self, level: int) -> bool:
        if level == LogLevel.VERBOSE:
            return self.verbose_level > 0
        if level == LogLevel.INFO:
            return self.info
        if level == LogLevel.WARNING:
            return self.warning
        return self.error
