"""What a call needs of the instance whose stub made it (instances/instance.py
`ModelInstance`): its names, the way back to its stub, and its count of calls to its own
model; and a call run as a task (`run_call`). On the event loop's thread."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol


class Caller(Protocol):
    name: str  # the instance's
    model_name: str

    def reply(self, call_id: int, error: str | None, value: object) -> None:
        """Answer call `call_id` of the stub (on the queue its waiting thread reads)."""

    def reply_item(self, call_id: int, value: object, final: bool) -> None:
        """One answer of a streamed call of the stub."""

    def begin_self_call(self) -> None:
        """A BLS call of the stub to its own model started."""

    def end_self_call(self) -> None:
        """That call ended."""

    @property
    def waits_on_own_model(self) -> bool:
        """Whether it runs a batch that waits on a BLS call to its own model."""

    def direct_origin(self) -> tuple[int, str] | None:
        """Its stub's origin and bell, if the stub may send BLS calls to other stubs
        itself (stub/direct_bls.py); None if not (no stub, or one without a bell)."""


def run_call(tasks: dict[tuple[int, int], asyncio.Task], key: tuple[int, int],
             call: Coroutine[Any, Any, None]) -> None:
    """Run a call as a task, held in `tasks` under `key` (caller, call id) until it ends:
    so it can be cancelled with its caller."""
    task = asyncio.get_running_loop().create_task(call)
    tasks[key] = task
    task.add_done_callback(lambda _: tasks.pop(key, None))
