"""What a model instance tells its model: the one seam from `instances/` back up.

`Model` implements `InstanceEvents` and hands itself to each of its instances, which
call nothing else above them. Every method is called on the server's event loop thread
(the one that reads the stubs' up queues), never with a lock held, and must not block.
The instance that tells names itself: of the type `Instance` (instance.py's
`ModelInstance`, which this module need not know).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from pbserve.core.pending import PendingRequest

Instance = TypeVar("Instance", contravariant=True)


class InstanceEvents(Protocol[Instance]):
    """A model's side of its instances (model.py's `Model`)."""

    def instance_idle(self, instance: Instance) -> None:
        """`instance` can take its next batch. On the event loop, when the stub's answer
        ending a batch was read (after `batch_done` for it) and when a restarted stub is
        ready (after `instance_up`)."""

    def batch_done(self, batch: list[PendingRequest]) -> None:
        """A batch sent to the stub is over: answered, failed, or its stub died or was
        stopped. On the event loop, once per batch, before `instance_idle`; its requests
        may still owe responses (a decoupled model's)."""

    def reschedule(self, pending: PendingRequest) -> None:
        """The model released `pending` with RESCHEDULE: it is no longer in flight and
        goes back to the scheduler. On the event loop, before `batch_done` for its
        batch."""

    def requeue(self, batch: list[PendingRequest]) -> None:
        """A batch that waited in the queue of a stub that died never started: it goes
        back to the front of the scheduler's queue. On the event loop (the stub's exit
        is reported there), for each waiting batch, the newest first, before the running
        batch's requests fail."""

    def instance_down(self, instance: Instance, cause: str, restart_failed: bool
                      ) -> None:
        """`instance`'s stub died on its own (`restart_failed` False), or starting a new
        one failed (True, once per failed try); it is RESTARTING. On the event loop."""

    def instance_up(self, instance: Instance) -> None:
        """A restarted stub of `instance` is READY. On the event loop, before
        `instance_idle`."""

    def responded(self, pending: PendingRequest, error: bool, empty: bool,
                  arrived_ns: int) -> None:
        """A response of `pending` was made of the stub's message that arrived at
        `arrived_ns` (a decoupled model's, for its response statistics). On the event
        loop, just after the response was delivered."""
