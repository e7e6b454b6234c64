"""The parent's side of what stubs ask it: each CALL and NOTIFY to its concern by its op.

A CALL (or CALL_DIRECT, from the stub's main thread) wants one answer, sent with the
caller's `reply` (or `reply_item` for a stream): a BLS call is bls.py's; a custom metric
(metrics.py) or model control (model_control.py) call is answered with what its function
returns, in a task of its own; so is a stub's ask for a model's route, to send it BLS
calls itself (direct.py). A NOTIFY (metric deletes from finalizers; what a stub's direct
calls add to statistics, or cancel) wants none.
CALL_CANCEL, BLS_RELEASE and the cancellation of the requests a call serves are BLS's.
Everything here runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable

from pbserve.core.stub_calls.bls import BlsCalls, CalledModel
from pbserve.core.stub_calls.caller import Caller, run_call
from pbserve.core.stub_calls.direct import DirectCalls
from pbserve.core.stub_calls.metrics import MetricCalls
from pbserve.core.stub_calls.model_control import ModelControl, ModelRepository
from pbserve.core.stub_calls.remote import RemoteModels
from pbserve.core.memory.block_refs import BlockRefs
from pbserve.errors import ServerError

log = logging.getLogger("pbserve.core")


class StubCalls:
    """`find_model` and `view`: BlsCalls'; `repository`: who answers model control (the
    model manager; None: not available)."""

    def __init__(self, find_model: Callable[[str, str], CalledModel],
                 view: Callable[[str, int, int], memoryview],
                 repository: ModelRepository | None = None) -> None:
        self._bls = BlsCalls(find_model, view)
        self._metrics = MetricCalls()
        self._control = ModelControl(repository)
        self._direct = DirectCalls(find_model)
        self.custom_metrics = self._metrics.metrics  # rendered on the metrics port
        # op -> what answers a call with a value; op -> what takes a NOTIFY
        self._answers = {**self._metrics.answers(), **self._control.answers(),
                         **self._direct.answers()}
        self._notices = {**self._metrics.notices(), **self._direct.notices()}
        self._tasks: dict[tuple[int, int], asyncio.Task] = {}  # answers being made
        # BLS's own, bound here (no call between: a BLS call's release comes per call)
        self.cancel = self._bls.cancel_stream  # CALL_CANCEL (ResponseIterator.cancel)
        self.cancel_on_behalf = self._bls.cancel_on_behalf  # a request was cancelled
        self.release = self._bls.release  # BLS_RELEASE

    @property
    def remote(self) -> RemoteModels | None:
        """Models other processes serve (remote.py), set by the layer above: BLS calls
        and readiness questions about models not loaded here go there."""
        return self._bls.remote

    @remote.setter
    def remote(self, remote: RemoteModels | None) -> None:
        self._bls.remote = self._control.remote = remote

    @property
    def blocks(self) -> BlockRefs | None:
        """The parent's blocks other processes' outputs are copied into (remote.py)."""
        return self._bls.blocks

    @blocks.setter
    def blocks(self, blocks: BlockRefs | None) -> None:
        self._bls.blocks = blocks

    def handle(self, caller: Caller, call_id: int, op: str, args: tuple) -> None:
        """A CALL: a BLS call (answered at once when it can be, BlsCalls.call), else its
        function's answer, made in a task. Either answers with caller.reply (or
        reply_item)."""
        if op == "bls":
            self._bls.call(caller, call_id, args)
            return
        answer = self._answers.get(op)
        if answer is None:
            caller.reply(call_id, f"pbserve does not know the call '{op}'", None)
            return
        run_call(self._tasks, (id(caller), call_id), _replying(answer, caller, call_id, args))

    def notify(self, caller: Caller, op: str, args: tuple) -> None:
        """A NOTIFY: run after the calls already received (their tasks), answer nothing."""
        notice = self._notices.get(op)
        if notice is not None:
            asyncio.get_running_loop().call_soon(lambda: notice(caller, *args))

    def caller_gone(self, caller: Caller) -> None:
        """A stub ended: release what it viewed and stop what it asked for."""
        self._bls.caller_gone(caller)
        self._direct.caller_gone(caller)
        for (owner, _), task in list(self._tasks.items()):
            if owner == id(caller):
                task.cancel()
        self._metrics.caller_gone(caller)


async def _replying(answer: Callable[..., object], caller: Caller, call_id: int,
                    args: tuple) -> None:
    """Reply with what `answer(caller, *args)` returns (or awaits); a ServerError's
    message becomes the TritonModelException the model sees."""
    try:
        value = answer(caller, *args)
        if inspect.isawaitable(value):
            value = await value
    except ServerError as err:
        caller.reply(call_id, err.message, None)
    except Exception as exc:  # the model gets the error, not the server
        log.exception("call from '%s' failed", caller.name)
        caller.reply(call_id, f"{type(exc).__name__}: {exc}", None)
    else:
        caller.reply(call_id, None, value)
