"""What a model instance tells those above it: the seams from `instances/` back up.

`Model` implements `InstanceEvents` (its outage) and hands itself to each of its
instances; its scheduler (scheduling/) implements `SchedulerEvents` and is handed to them
with the completed config (`ModelInstance.configure`). What a batch or a response adds to
the model's statistics the instances tell `ModelAccounting` (observability/model_stats.py)
themselves. Every method is called on the server's event loop thread (the one that reads
the stubs' up queues), never with a lock held, and must not block. The instance that
tells names itself: of the type `Instance` (instance.py's `ModelInstance`, which this
module need not know).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from pbserve.core.pending import PendingRequest

Instance = TypeVar("Instance", contravariant=True)


class InstanceEvents(Protocol[Instance]):
    """A model's side of its instances (model.py's `Model`)."""

    def instance_down(self, instance: Instance, cause: str, restart_failed: bool
                      ) -> None:
        """`instance`'s stub died on its own (`restart_failed` False), or starting a new
        one failed (True, once per failed try); it is RESTARTING."""

    def instance_up(self, instance: Instance) -> None:
        """A restarted stub of `instance` is READY. Before its scheduler hears that it is
        idle."""


class SchedulerEvents(Protocol[Instance]):
    """A scheduler's side of its model's instances (scheduling/scheduler.py `Scheduler`,
    sequence_batcher.py `SequenceBatcher`)."""

    def on_idle(self, instance: Instance) -> None:
        """`instance` can take its next batch: the stub's answer ending a batch was read
        (after `ModelAccounting.batch_done` for it), or a restarted stub is ready (after
        `InstanceEvents.instance_up`)."""

    def reschedule(self, pending: PendingRequest) -> None:
        """The model released `pending` with RESCHEDULE: it is no longer in flight and
        goes back to the scheduler. Before `batch_done` for its batch."""

    def requeue(self, batch: list[PendingRequest]) -> None:
        """A batch that waited in the queue of a stub that died, or for the rate
        limiter, never started: it goes back to the front of the scheduler's queue. For
        each waiting batch, the newest first, before the running batch's requests fail
        (the stub's exit is reported on the event loop)."""
