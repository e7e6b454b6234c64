"""What the running model code is doing, as context variables."""

from __future__ import annotations

import contextvars

# The keys of the requests the running code serves. BLS calls are made on their behalf,
# so that cancelling those requests cancels the calls too. Set around a synchronous
# `execute` and inside an `async def execute` task (its child tasks inherit it).
CURRENT_KEYS: contextvars.ContextVar[tuple] = contextvars.ContextVar("pbserve_keys", default=())
