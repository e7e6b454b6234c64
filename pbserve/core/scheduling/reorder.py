"""preserve_ordering (Triton's DelegateResponse in dynamic_batch_scheduler.cc): responses
leave in the order their requests were batched.

Each request gets a sequence number as it is batched (`enter`); the request with the
lowest number not yet complete is the head, whose responses go on to its caller at once.
A later request's responses are held until every request batched before it has had its
final response, or its caller went away (its future cancelled: nothing waits for its
responses, which are released unread).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from pbserve.core.pending import PendingRequest
    from pbserve.core.types import InferResponse


class ReorderBuffer:
    """One model's reorder buffer; used on the event loop only."""

    def __init__(self) -> None:
        self._next = 0  # the number the next batched request gets
        self._waiting: dict[int, PendingRequest] = {}  # not complete, by number (ascending)
        self._held: dict[int, list[InferResponse]] = {}  # responses not yet handed on

    def enter(self, pending: PendingRequest) -> None:
        """`pending` is batched: its responses wait for those of the requests before it
        (PendingRequest.deliver offers them here)."""
        seq = self._next
        self._next += 1
        pending.order, pending.order_seq = self, seq
        self._waiting[seq] = pending
        if pending.future is not None:
            pending.future.add_done_callback(functools.partial(self._on_future_done, seq))

    def offer(self, pending: PendingRequest, response: InferResponse) -> None:
        """A response of `pending` (after `enter`): handed on now if its turn has come,
        else held."""
        seq = pending.order_seq
        if _left(pending):
            response.release()
            self._drop(seq)
            self._flush()
            return
        if seq != self._head():
            self._flush()  # heads whose callers left make way
        if seq == self._head():
            pending.emit(response)
            if response.final:
                del self._waiting[seq]
                self._flush()
        else:
            self._held.setdefault(seq, []).append(response)

    def _head(self) -> int:
        return next(iter(self._waiting), self._next)

    def _flush(self) -> None:
        """Hand on what the new head holds; past heads that are complete or left."""
        while self._waiting:
            seq, pending = next(iter(self._waiting.items()))
            if _left(pending):
                self._drop(seq)
                continue
            held = self._held.pop(seq, ())
            for response in held:
                pending.emit(response)
            if not held or not held[-1].final:
                return
            del self._waiting[seq]

    def _on_future_done(self, seq: int, future: asyncio.Future) -> None:
        """A unary caller went away: what its request holds is released now."""
        if future.cancelled():
            self._drop(seq)
            self._flush()

    def _drop(self, seq: int) -> None:
        """The caller of request `seq` went away: it no longer holds back those after it,
        and what it held is released unread."""
        self._waiting.pop(seq, None)
        for response in self._held.pop(seq, ()):
            response.release()


def _left(pending: PendingRequest) -> bool:
    """Whether the caller went away (a unary request's future was cancelled)."""
    return pending.future is not None and pending.future.cancelled()
