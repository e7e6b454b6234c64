"""BLS calls: a stub's `exec`, `async_exec` and decoupled streams to another model.

A BLS call goes through the target model's scheduler, the same one clients use. Its
input tensors stay where the calling stub put them (descriptors are passed on), and the
target's outputs go back as descriptors: a tensor crosses A -> B -> A without a copy
between processes. A model not loaded here goes to `remote` when the layer above set one
(remote.py: another process's model, the same API for the caller). The parent holds
each answered response under a token until the caller says (BLS_RELEASE) that it no
longer views its outputs, or the caller dies. The target is found by the model manager
(`find_model`), as a `CalledModel`; the caller is a `Caller` (caller.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from pbserve.core.observability.tracing import TRACER
from pbserve.core.stub_calls.caller import Caller, run_call
from pbserve.core.stub_calls.remote import RemoteModels, in_parent_blocks
from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.errors import ErrorCode, ServerError
from backend_utils.constants import TRITONSERVER_MEMORY_CPU as MEMORY_CPU
from shm.cuda_region import DeviceBytes

if TYPE_CHECKING:
    from pbserve.core.memory.block_refs import BlockRefs
    from pbserve.core.pending import PendingRequest

log = logging.getLogger("pbserve.core")
NO_TOKEN = 0


class BlsArgs(NamedTuple):
    """A BLS CALL's arguments, in the order the stub puts them (stub/bls.py `_args`)."""

    model_name: str
    version: str
    request_id: str
    correlation_id: int | str
    flags: int
    parameters: str  # JSON
    timeout: int
    requested: tuple[str, ...]
    descs: tuple  # TensorDescs of the inputs, where the caller put them
    decoupled: bool
    on_behalf_of: tuple[int, ...]  # keys of the caller's requests it is made for
    trace_id: int | None
    preferred_memory: int


class CalledModel(Protocol):
    """A model of this process a BLS call goes to (model.py's `Model`; an ensemble's
    `EnsembleModel` has no instances, nor the `infer_now` a Model has for `call`)."""

    name: str
    decoupled: bool

    @property
    def instances(self) -> Sequence[Caller]: ...

    async def infer(self, request: InferRequest, descs: tuple | None = None
                    ) -> InferResponse: ...

    def stream_infer(self, request: InferRequest, descs: tuple | None = None,
                     on_submit: Callable[[PendingRequest], None] | None = None
                     ) -> AsyncIterator[InferResponse]: ...

    def cancel(self, pending: PendingRequest) -> None: ...

    def ask_to_cancel(self, pending: PendingRequest) -> None: ...


class BlsCalls:
    """`find_model(name, version)`: the loaded model a call names (ServerError when none
    is); `view(region, offset, nbytes)`: a caller's input where it put it."""

    def __init__(self, find_model: Callable[[str, str], CalledModel],
                 view: Callable[[str, int, int], memoryview]) -> None:
        self._find_model = find_model
        self._view = view
        self._tokens = itertools.count(1)
        self._held: dict[int, tuple[Caller, InferResponse]] = {}
        # (caller, call_id) -> a call running in a task (`_run`)
        self._tasks: dict[tuple[int, int], asyncio.Task] = {}
        # (caller, call_id) -> a unary BLS call queued without a task (`call`)
        self._queued: dict[tuple[int, int], _QueuedCall] = {}
        # (caller, call_id) -> keys of the caller's requests the call still serves
        self._serving: dict[tuple[int, int], set[int]] = {}
        # (caller, call_id) -> what asks a streamed call's callee to cancel, once it is
        # queued; None: cancelled (ResponseIterator.cancel) before it was queued
        self._streams: dict[tuple[int, int], Callable[[], None] | None] = {}
        # Models served by other processes, and the parent's blocks their outputs are
        # copied into (both set by the manager's owner, through StubCalls).
        self.remote: RemoteModels | None = None
        self.blocks: BlockRefs | None = None

    def call(self, caller: Caller, call_id: int, fields: tuple) -> None:
        """A BLS CALL (its `fields`: BlsArgs). A unary call to another model of this
        process, untraced, is queued now, and answered from the pass that reads the
        callee's response (Model.infer_now). A task would add a turn of the event loop on
        each way, and at c=8 a client's HTTP request is decoded in such a turn while the
        caller's stub waits. Any other call (streamed, another process's model, an
        ensemble, a model calling itself, a trace, or one the model lookup refuses) runs
        in a task (`_run`), which answers even its error."""
        args = BlsArgs(*fields)
        model_name = args.model_name
        if args.decoupled or args.trace_id is not None or TRACER.enabled:
            self._start(caller, call_id, args)
            return
        try:
            model = self._ready_model(model_name, args.version, False)
        except ServerError:
            self._start(caller, call_id, args)
            return
        # an ensemble (no infer_now) runs its steps in a task of its own anyway
        infer_now = getattr(model, "infer_now", None)
        if infer_now is None or caller in model.instances:
            self._start(caller, call_id, args)
            return
        key = (id(caller), call_id)
        call = self._queued[key] = _QueuedCall(caller, call_id, model)
        self._serving[key] = set(args.on_behalf_of)

        def answered(pending: "PendingRequest", response: InferResponse) -> None:
            if self._queued.pop(key, None) is None:  # cancelled: answered then
                response.release()
                return
            self._serving.pop(key, None)
            try:  # called from the callee's messages: its other requests must not fail
                caller.reply(call_id, None, self._answer(caller, response))
            except Exception:
                log.exception("BLS answer to '%s' failed", caller.name)

        try:
            call.pending = infer_now(self._request(args), args.descs, answered)
        except Exception as err:
            if isinstance(err, ServerError):  # before the callee got it: Triton's words
                message = err.message
            else:  # a fault of the server's own: the caller must not hang
                log.exception("BLS call to model '%s' failed", model_name)
                message = str(err)
            if self._queued.pop(key, None) is not None:
                self._serving.pop(key, None)
                _reply_error(caller, call_id, False, ErrorCode.INTERNAL,
                             _run_failed(model_name, message))

    def _start(self, caller: Caller, call_id: int, args: BlsArgs) -> None:
        run_call(self._tasks, (id(caller), call_id), self._run(caller, call_id, args))

    def cancel_stream(self, caller: Caller, call_id: int) -> None:
        """CALL_CANCEL, `ResponseIterator.cancel()`: as in Triton, the callee is asked to
        stop and the stream goes on until the callee's final flag."""
        key = (id(caller), call_id)
        ask_to_cancel = self._streams.get(key)
        if ask_to_cancel is not None:
            ask_to_cancel()
        elif key in self._tasks:  # not queued yet: asked as soon as it is
            self._streams[key] = None

    def _cancel_call(self, caller: Caller, call_id: int) -> None:
        key = (id(caller), call_id)
        task = self._tasks.get(key)
        if task is not None:
            task.cancel()
        else:
            self._cancel_queued(key, answer=True)

    def cancel_on_behalf(self, caller: Caller, key: int) -> None:
        """Request `key` of `caller` was cancelled: cancel the BLS calls made for it
        (a call made for several requests goes once all of them are cancelled)."""
        for (owner, call_id), keys in list(self._serving.items()):
            if owner == id(caller) and key in keys:
                keys.discard(key)
                if not keys:
                    self._cancel_call(caller, call_id)

    def release(self, token: int) -> None:
        """BLS_RELEASE: the caller no longer views the outputs of the response held under
        `token`."""
        held = self._held.pop(token, None)
        if held is not None:
            held[1].release()

    def caller_gone(self, caller: Caller) -> None:
        """A stub ended: release what it viewed and stop the calls it made."""
        for token in [t for t, (c, _) in self._held.items() if c is caller]:
            self.release(token)
        for (owner, _), task in list(self._tasks.items()):
            if owner == id(caller):
                task.cancel()
        for key in [k for k in self._queued if k[0] == id(caller)]:
            self._cancel_queued(key, answer=False)
        for key in [k for k in self._streams if k[0] == id(caller)]:
            del self._streams[key]  # a task cancelled before it ran has no `finally`

    # -- running a call ----------------------------------------------------------------
    def _request(self, args: BlsArgs) -> InferRequest:
        """The request a BLS CALL's arguments describe, its inputs viewed where the
        caller put them."""
        params = args.parameters
        return InferRequest(
            args.model_name, args.version, args.request_id,
            # a GPU input's view is a DeviceBytes: its size, for validation (shm/pool.py)
            inputs=[TensorData(d[0], d[1], tuple(d[2]), self._view(d[3], d[4], d[5]))
                    for d in args.descs],
            requested_outputs=list(args.requested) or None,
            parameters=json.loads(params) if params and params != "{}" else {},
            correlation_id=args.correlation_id, flags=args.flags, timeout_us=args.timeout,
            # made with `trace=request.trace()`: its trace is a child of that request's
            _trace_parent=None if args.trace_id is None else TRACER.live(args.trace_id),
            # the caller takes GPU outputs where they are, unless it prefers the CPU
            gpu_outputs=args.preferred_memory != MEMORY_CPU)

    def _cancel_queued(self, key: tuple[int, int], answer: bool) -> None:
        """Cancel a call `call` queued and not yet answered: the callee drops or stops it
        (Model.cancel), and the caller, when `answer`, gets CANCELLED as from `_run`."""
        call = self._queued.pop(key, None)
        if call is None:
            return
        self._serving.pop(key, None)
        if call.pending is not None:
            call.model.cancel(call.pending)
        if answer:
            _reply_error(call.caller, call.call_id, False, ErrorCode.CANCELLED,
                         _cancelled(call.model.name))

    async def _run(self, caller: Caller, call_id: int, args: BlsArgs) -> None:
        model_name, version, decoupled, descs = \
            args.model_name, args.version, args.decoupled, args.descs
        self._serving[(id(caller), call_id)] = set(args.on_behalf_of)
        request = self._request(args)
        self_call = local = False
        try:
            model = self._ready_model(model_name, version, decoupled)
            if model is None:  # served by another process
                await self._remote_bls(caller, call_id, request, decoupled)
                return
            local = True
            self_call = caller in model.instances
            if self_call:
                caller.begin_self_call()
                self._check_deadlock(model)
            if decoupled:
                def queued(pending: "PendingRequest") -> None:
                    key = (id(caller), call_id)
                    cancelled = key in self._streams
                    self._streams[key] = lambda: model.ask_to_cancel(pending)
                    if cancelled:
                        model.ask_to_cancel(pending)

                async for response in model.stream_infer(request, descs=descs,
                                                         on_submit=queued):
                    caller.reply_item(call_id, self._answer(caller, response), response.final)
            else:
                response = await model.infer(request, descs=descs)
                caller.reply(call_id, None, self._answer(caller, response))
        except ServerError as err:  # before the callee got the request: Triton's words
            # (INTERNAL); a remote call that lost its worker or the plane says UNAVAILABLE
            unavailable = not local and err.code is ErrorCode.UNAVAILABLE
            _reply_error(caller, call_id, decoupled,
                         ErrorCode.UNAVAILABLE if unavailable else ErrorCode.INTERNAL,
                         _run_failed(model_name, err.message))
        except asyncio.CancelledError:
            _reply_error(caller, call_id, decoupled, ErrorCode.CANCELLED,
                         _cancelled(model_name))
            raise
        except Exception as err:  # a fault of the server's own: the caller must not hang
            log.exception("BLS call to model '%s' failed", model_name)
            _reply_error(caller, call_id, decoupled, ErrorCode.INTERNAL,
                         _run_failed(model_name, str(err)))
        finally:
            self._serving.pop((id(caller), call_id), None)
            self._streams.pop((id(caller), call_id), None)
            if self_call:
                caller.end_self_call()

    def _ready_model(self, name: str, version: str, decoupled: bool
                     ) -> CalledModel | None:
        """The model a BLS call goes to (None: the remote one), refused as Triton
        refuses it."""
        try:  # a loaded model whose stub restarts takes the call: it waits for the stub
            model = self._find_model(name, version)
        except ServerError:
            model = None
        if model is not None:
            target_decoupled = model.decoupled
        else:
            try:  # another process's model, when the layer above knows of one
                if self.remote is None:
                    raise ServerError(ErrorCode.NOT_FOUND, name)
                target_decoupled = self.remote.is_decoupled(name, version)
            except ServerError as err:
                words = f"Failed for execute the inference request. Model '{name}' is not ready."
                if err.code is ErrorCode.UNAVAILABLE:  # the plane's: why, to retry later
                    raise ServerError(ErrorCode.UNAVAILABLE, f"{words[:-1]}: {err.message}"
                                      ) from None
                raise ServerError(ErrorCode.INTERNAL, words) from None
        if target_decoupled and not decoupled:
            raise ServerError(ErrorCode.INVALID_ARG, (
                f"Model {name} is using the decoupled. The current BLS request call doesn't "
                "support models using the decoupled transaction policy. Please use "
                "'decoupled=True' argument to the 'exec' or 'async_exec' calls for "
                "decoupled models.'"))
        return model

    async def _remote_bls(self, caller: Caller, call_id: int,
                          request: InferRequest, decoupled: bool) -> None:
        """A BLS call to another process's model (`remote`); its outputs are copied into
        the parent's pool for the caller."""
        assert self.remote is not None and self.blocks is not None
        for tensor in request.inputs:
            if isinstance(tensor.data, DeviceBytes):
                raise ServerError(ErrorCode.INVALID_ARG, (
                    f"input '{tensor.name}' is a GPU tensor: it cannot go to a model "
                    f"served by another worker; move it to the CPU first"))
        if not decoupled:
            response = await self.remote.infer(request)
            caller.reply(call_id, None, self._answer(
                caller, in_parent_blocks(response, self.blocks)))
            return
        key = (id(caller), call_id)
        stream = self.remote.stream_infer(request)
        cancelled = key in self._streams
        self._streams[key] = stream.ask_to_cancel
        if cancelled:
            stream.ask_to_cancel()
        async with contextlib.aclosing(stream):
            async for response in stream:
                caller.reply_item(call_id, self._answer(
                    caller, in_parent_blocks(response, self.blocks)), response.final)

    def _answer(self, caller: Caller, response: InferResponse) -> tuple:
        if response.error is not None:
            response.release()
            return (((int(response.error.code), response.error.message), (), "{}"), NO_TOKEN)
        params = json.dumps(response.parameters) if response.parameters else "{}"
        if not response._descs:
            response.release()
            return ((None, (), params), NO_TOKEN)
        token = next(self._tokens)
        self._held[token] = (caller, response)
        return ((None, response._descs, params), token)

    @staticmethod
    def _check_deadlock(model: CalledModel) -> None:
        """A model calling itself while every one of its instances is busy, each waiting
        on a call to this same model, can never be served: say so instead of hanging."""
        if all(i.waits_on_own_model for i in model.instances):
            raise ServerError(ErrorCode.UNAVAILABLE, (
                f"BLS deadlock: model '{model.name}' called itself while all its "
                f"{len(model.instances)} instance(s) are busy waiting on BLS calls; add "
                f"instances (instance_group count) or call another model"))


class _QueuedCall:
    """A unary BLS call `BlsCalls.call` queued, until it is answered or cancelled."""

    __slots__ = ("caller", "call_id", "model", "pending")

    def __init__(self, caller: Caller, call_id: int, model: CalledModel) -> None:
        self.caller = caller
        self.call_id = call_id
        self.model = model
        self.pending: "PendingRequest | None" = None  # once queued


def _cancelled(model_name: str) -> str:
    """The answer of a BLS call cancelled before its callee answered."""
    return f"BLS request to model '{model_name}' was cancelled"


def _run_failed(model_name: str, detail: str) -> str:
    """Triton's words for a BLS call that failed before or outside the callee's model."""
    return f"Model {model_name} - Error when running inference: {detail}"


def _reply_error(caller: Caller, call_id: int, decoupled: bool, code: ErrorCode,
                 message: str) -> None:
    """A BLS call's error answer: its only reply, or its final stream item."""
    answer = (((int(code), message), (), "{}"), NO_TOKEN)
    if decoupled:
        caller.reply_item(call_id, answer, True)
    else:
        caller.reply(call_id, None, answer)
