"""Shutting the server down within `--exit-timeout-secs` (Triton's flag, default 30 s).

1. From the signal on, no stub is restarted, and the frontends accept nothing new: the
   listening sockets close, idle connections close, open gRPC streams read no more
   requests.
2. Requests in flight (queued or running, unary or streamed) go on and are delivered, for
   up to the exit timeout.
3. What is left then is ended with an UNAVAILABLE error the frontends deliver: an HTTP
   error response, an SSE `error` event, a gRPC status, an error on a gRPC stream (which
   then ends with UNAVAILABLE). The frontends get `FLUSH_S` to write them.
4. Then every model is unloaded: `finalize` runs in each stub (one still in `execute`
   gets a short time to return, then it is killed), and the shared memory goes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from pbserve.backend.manager import ModelManager
from pbserve.errors import ErrorCode, ServerError

log = logging.getLogger("pbserve")

FLUSH_S = 5.0  # after the exit timeout: the frontends write the errors, then close
UNLOAD_TIMEOUT_S = 60.0  # finalize (30 s at most per stub) and the kill of what hangs


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
    if closing:
        _, left = await asyncio.wait(closing, timeout=exit_timeout_s)
    else:
        left = set()
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
