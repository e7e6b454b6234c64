"""A model's own readiness check, `def is_ready(self)` or `async def is_ready(self)`
(Triton 26.03+), asked of one instance's stub.

Readiness checks that come while one is in flight share its answer (one call to the
stub at a time), and each waits 5 s at most, as Triton does: a timeout, an exception or a
False means not ready. Models without `is_ready` cost nothing: no message is sent.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from stub import protocol as p

TIMEOUT_S = 5.0


class UserReadiness:
    def __init__(self, instance_name: str, send_control: Callable[[tuple], None]) -> None:
        self._instance_name = instance_name
        self._send_control = send_control
        self.defined = False  # the model has `is_ready` (told by INIT_DONE)
        self._inflight: asyncio.Future | None = None

    async def not_ready_reason(self) -> str | None:
        """None when the model says it is ready; else why not, in Triton's words."""
        if not self.defined:
            return None
        if self._inflight is None:
            self._inflight = asyncio.get_running_loop().create_future()
            self._send_control(p.is_ready())
        try:
            error, ready = await asyncio.wait_for(asyncio.shield(self._inflight), TIMEOUT_S)
        except asyncio.TimeoutError:
            return "Timed out waiting for user-defined is_ready() response"
        if error is not None:
            return error
        if not ready:
            return f"Model '{self._instance_name}' is not ready (user-defined check failed)."
        return None

    def answered(self, error: str | None, ready: bool) -> None:
        """READINESS from the stub: every waiting check gets it; the next one asks again."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None and not inflight.done():
            inflight.set_result((error, ready))

    def stub_gone(self) -> None:
        """The stub ended: a check waiting on it is answered, the next stub is asked anew."""
        self.answered("Stub process is not healthy while waiting for user-defined "
                      "is_ready() response", False)
        self.defined = False
