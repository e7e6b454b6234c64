"""Stopping a background task for sure: cancel it, and cancel it again while it runs on.

One cancellation is not always enough. Before Python 3.12, `asyncio.wait_for` returns the
awaited result, and drops the cancellation, when the two arrive in the same turn of the
loop; libraries call it inside their waits (nats-py's `KeyWatcher.updates`,
`JetStreamContext.PullSubscription.fetch`). A task that loops on such a wait, going on
after each timeout, then runs on for good, and whoever awaits its end after one
`cancel()` waits for good too (a NATS frontend that never exited: issue 40). Cancelling
again each RECANCEL_S ends it at its next wait.
"""

from __future__ import annotations

import asyncio
from typing import Iterable

RECANCEL_S = 0.1


async def cancel_and_wait(tasks: asyncio.Task | Iterable[asyncio.Task] | None) -> None:
    """Cancel `tasks` (one, several or None) and return once every one has ended,
    cancelling again each RECANCEL_S those that go on; their results and errors are
    dropped (a task that stops is expected to end with CancelledError)."""
    if tasks is None:
        return
    every = {tasks} if isinstance(tasks, asyncio.Future) else set(tasks)
    left = every
    while left:
        for task in left:
            task.cancel()
        _, left = await asyncio.wait(left, timeout=RECANCEL_S)
    for task in every:  # retrieved: no "exception was never retrieved" later
        if not task.cancelled():
            task.exception()
