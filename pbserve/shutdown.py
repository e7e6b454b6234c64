"""Shutting the server down within `--exit-timeout-secs` (Triton's flag, default 30 s).

1. From the signal on, no stub is restarted, and the frontends accept nothing new: the
   listening sockets close, idle connections close, open gRPC streams read no more
   requests.
2. Requests in flight (queued or running, unary or streamed) go on and are delivered, for
   up to the exit timeout; each second the log says how many are left ("Timeout 29:
   Found 1 in-flight inference requests", tritonserver's words for its own drain).
3. What is left then is ended with an UNAVAILABLE error the frontends deliver: an HTTP
   error response, an SSE `error` event, a gRPC status, an error on a gRPC stream (which
   then ends with UNAVAILABLE). The frontends get `FLUSH_S` to write them.
4. Then every model is unloaded: `finalize` runs in each stub (one still in `execute`
   gets a short time to return, then it is killed), and the shared memory goes.
A second signal, or a shutdown that outlives `shutdown_deadline`, ends the server at once
(exit_signals.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from pbserve.core.manager import ModelManager
from pbserve.errors import ErrorCode, ServerError

log = logging.getLogger("pbserve")

FLUSH_S = 5.0  # after the exit timeout: the frontends write the errors, then close
UNLOAD_TIMEOUT_S = 60.0  # finalize (30 s at most per stub) and the kill of what hangs
DRAIN_REPORT_S = 1.0  # while the drain waits, it logs what is left this often


def shutdown_deadline(exit_timeout_s: float) -> float:
    """The longest a clean shutdown may take (exit_signals.py's watchdog forces the exit
    after it): a worker's leaving the plane and the drain (the exit timeout each), the
    flush, the unload, and the leftover tasks' bound (app.py)."""
    return 2 * exit_timeout_s + FLUSH_S + UNLOAD_TIMEOUT_S + 10.0


class Frontend(Protocol):
    async def close(self, grace: float) -> None: ...


async def shut_down(frontends: list[Frontend], manager: ModelManager | None,
                    exit_timeout_s: float) -> None:
    if manager is None:  # a frontend of the request plane: no models here
        for frontend in frontends:
            await frontend.close(exit_timeout_s + FLUSH_S)
        return
    manager.begin_stop()
    closing = [asyncio.ensure_future(f.close(exit_timeout_s + FLUSH_S)) for f in frontends]
    left = await _drain(closing, manager, exit_timeout_s)
    error = ServerError(ErrorCode.UNAVAILABLE, (
        f"the server is shutting down: the request did not complete within the exit "
        f"timeout ({exit_timeout_s:g} s, --exit-timeout-secs)"))
    ended = manager.end_requests(error)
    if ended:
        log.warning("%d request(s) still in flight after the exit timeout of %g s: ended "
                    "with an error", ended, exit_timeout_s)
    if left:
        await asyncio.wait(left)
    for task in closing:
        if not task.cancelled() and task.exception() is not None:
            log.error("closing a frontend failed", exc_info=task.exception())
    try:
        await asyncio.wait_for(manager.stop(), UNLOAD_TIMEOUT_S)
    except asyncio.TimeoutError:
        log.error("models did not finish unloading within %g s", UNLOAD_TIMEOUT_S)


async def _drain(closing: list[asyncio.Future], manager: ModelManager,
                 exit_timeout_s: float) -> set[asyncio.Future]:
    """Wait for the frontends to close (their requests answered), `exit_timeout_s` at
    most, saying each second what is left, as tritonserver does; those still closing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + exit_timeout_s
    left = set(closing)
    while left and (remaining := deadline - loop.time()) > 0:
        _, left = await asyncio.wait(left, timeout=min(DRAIN_REPORT_S, remaining))
        if left:
            log.info("Timeout %d: Found %d in-flight inference requests",
                     max(0, round(deadline - loop.time())), manager.requests_in_flight())
    return left
