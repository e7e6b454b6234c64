"""The core's side of one frontend process: its requests run against the core, their
responses go back as descriptors, and what it asks besides (calls.py) is answered.

A request's inputs stay in the frontend's pool: the core views them there (for
validation) and passes their descriptors on to the stub (`LoadedModel.infer(descs=)`),
as a BLS call's. The frontend frees them once told no process reads them any more:
with the final response in the common case (`inputs_done`), else by INPUTS_DONE (a
request whose client left while its stub still ran it). A response's outputs stay in
the stub's pool: the core holds the response under a token until the frontend has
written them (RELEASE). A frontend that dies has its requests cancelled in the models,
its held responses released, and its regions forgotten once nothing reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any

from pbserve.core.api import InferenceCore
from pbserve.core.observability.log_settings import LogSettings
from pbserve.core.types import InferRequest, InferResponse, ShmRef, TensorData
from pbserve.errors import ErrorCode, ServerError
from pbserve.frontends import protocol as fp
from pbserve.frontends.calls import CoreCalls
from pbserve.frontends.channel import CoreEnd
from shm.pool import RegionMap
from stub import protocol as p
from stub.frontends import LAST_PARENT_KEY

log = logging.getLogger("pbserve.frontends")
NO_TOKEN = 0


class FrontendLink:
    """Serves one frontend process over `channel`. `regions`: the core's map of other
    processes' regions (the frontend's inputs are viewed there); `in_core_blocks`:
    copies a response's outputs that are in process memory into the core's pool, for
    those too large to go in a message (stub_calls/remote.py `in_parent_blocks`)."""

    def __init__(self, name: str, channel: CoreEnd, core: InferenceCore,
                 regions: RegionMap,
                 in_core_blocks: Callable[[InferResponse], InferResponse] | None,
                 calls: CoreCalls) -> None:
        self.name = name
        self.channel = channel
        self._core = core
        self._regions = regions
        self._in_core_blocks = in_core_blocks
        self._calls = calls
        self._tasks: dict[int, asyncio.Task] = {}  # request id -> its task
        self._queued: dict[int, Callable[[], None]] = {}  # request id -> its cancel
        self._held: dict[int, InferResponse] = {}  # token -> a response being written
        self._tokens = itertools.count(1)
        self._open: set[int] = set()  # requests whose final response is not sent yet
        self._inputs_read: set[int] = set()  # open requests whose inputs no one reads now
        self._gone = False
        self._handlers: dict[int, Callable[[tuple], None]] = {
            fp.INFER: self._on_infer, fp.QUEUE: self._on_queue, fp.CANCEL: self._on_cancel,
            fp.RELEASE: self._on_release, fp.CALL: self._on_call,
            fp.REGIONS_GONE: self._on_regions_gone, fp.STARTED: self._on_started,
            fp.EXPECT: self._on_expect, fp.DIRECT_STATS: self._on_direct_stats,
            fp.CANCEL_DIRECT: self._on_cancel_direct,
        }
        self.started = asyncio.Event()  # the frontend serves its endpoints
        self.on_regions_gone: Callable[[FrontendLink, tuple], None] = lambda _l, _n: None

    def start(self) -> None:
        self.channel.start(self._on_messages)

    # -- what the core's upkeep tells it (memory/shm_upkeep.py `ShmPeer`) ---------------
    def forget_regions(self, names: tuple[str, ...]) -> None:
        self._tell(fp.forget_regions(names))

    def trim(self) -> None:
        self._tell(fp.trim())

    def apply_log_settings(self, settings: LogSettings) -> None:
        """The server's log settings changed (log_settings.py SERVER_LOG's listener)."""
        self._tell(fp.log_settings(settings.as_dict()))

    # -- incoming ---------------------------------------------------------------------
    def _on_messages(self, batch: list) -> None:
        handlers = self._handlers
        for message in batch:
            try:
                handlers[message[0]](message)
            except Exception:  # one bad message must not stop the others
                log.exception("frontend %s: message %r failed", self.name, message[0])

    def _on_expect(self, message: tuple) -> None:
        """A request for the model is being decoded: its idle instance may get ready."""
        _, model, version = message
        try:
            self._core.model_handle(model, version).expect()
        except ServerError:
            pass  # the request itself gets the error

    def _on_direct_stats(self, message: tuple) -> None:
        """What the frontend's direct requests (frontends/direct.py) add to statistics."""
        _, entries, responses = message
        for model, version, *figures in entries:
            try:
                self._core.model_handle(model, version).add_direct_stats(*figures)
            except ServerError:
                pass  # unloaded meanwhile
        for model, version, figures in responses:
            try:
                self._core.model_handle(model, version).add_direct_responses(figures)
            except ServerError:
                pass

    def _on_cancel_direct(self, message: tuple) -> None:
        """A direct request's client left: the model sees it (`is_cancelled`), and its
        BLS calls are cancelled, as for a request through the core."""
        _, model, version, instance_name, key = message
        try:
            self._core.model_handle(model, version).cancel_direct(instance_name, key)
        except ServerError:
            pass

    def _on_started(self, message: tuple) -> None:
        self.started.set()

    def _on_regions_gone(self, message: tuple) -> None:
        """The frontend trimmed its pool: the core's upkeep unmaps these regions here
        and in the stubs (ShmPeers.regions_gone)."""
        _, names = message
        self.on_regions_gone(self, names)

    def _on_infer(self, message: tuple) -> None:
        (_, rid, stream, model, version, request_id, inputs, requested, params,
         correlation_id, flags, priority, timeout_us, trace_headers, output_shm,
         releases) = message
        if releases:
            self._release(releases)
        view = self._regions.view
        tensors, descs = [], []
        try:
            for name, datatype, shape, region, offset, nbytes, shm in inputs:
                if shm is not None:
                    tensors.append(TensorData(name, datatype, tuple(shape), b"",
                                              ShmRef(shm[0], shm[1], shm[2])))
                    continue
                tensors.append(TensorData(name, datatype, tuple(shape),
                                          view(region, offset, nbytes)))
                descs.append((name, datatype, shape, region, offset, nbytes))
        except (OSError, ValueError) as err:  # a block the frontend named is not there
            self._tell(fp.inputs_done(rid))
            self._send_error(rid, model, request_id, ServerError(
                ErrorCode.INTERNAL, f"the request's inputs cannot be read: {err}"))
            return
        request = InferRequest(
            model, version, request_id, tensors,
            list(requested) if requested is not None else None,
            json.loads(params) if params != "{}" else {}, correlation_id, flags,
            priority, timeout_us,
            output_shm={n: ShmRef(r, o, b) for n, r, o, b in output_shm}
            if output_shm else None,
            uses_shm=len(descs) < len(tensors) or bool(output_shm),
            trace_headers=dict(trace_headers) if trace_headers else None)
        # Told when no process reads the inputs any more: at once when the request fails
        # before it is queued, else when its PendingRequest completes (pending.py).
        request._shm_release = lambda: self._inputs_free(rid)
        if not stream and self._queue_now(rid, model, version, request, tuple(descs)):
            return
        run = self._stream(rid, model, version, request, tuple(descs)) if stream \
            else self._unary(rid, model, version, request, tuple(descs))
        task = asyncio.get_running_loop().create_task(run)
        self._tasks[rid] = task
        self._open.add(rid)
        task.add_done_callback(lambda _: self._ended(rid))

    def _queue_now(self, rid: int, model: str, version: str, request: InferRequest,
                   descs: tuple) -> bool:
        """A unary request queued without a task, answered from the pass that reads its
        response (LoadedModel.infer_now: a task would cost a turn of the loop each way);
        False where only a task serves it (an ensemble, a trace, the cache, ...)."""
        try:
            handle = self._core.model_handle(model, version)
            now = getattr(handle, "infer_now", None)
            if now is None:
                return False
            self._open.add(rid)
            # a key of the frontend's: its stub may answer it itself (Model.infer_now)
            cancel = now(request, descs, lambda response: self._answered(rid, response),
                         rid if rid > LAST_PARENT_KEY else 0)
        except Exception as err:
            self._fail(rid, model, request, err, "request")
            return True
        if cancel is None:
            self._open.discard(rid)
            return False
        self._queued[rid] = cancel
        return True

    def _on_queue(self, message: tuple) -> None:
        """A request the frontend validated and made the stub's message of, under its own
        key (direct.py `stub_message`): queued on its model's batcher as it came
        (LoadedModel.queue_made), answered by its stub to the frontend."""
        _, model, version, batch_size, priority, msg, releases = message
        if releases:
            self._release(releases)
        rid = msg[p.REQ_KEY]
        request = InferRequest(model, version, msg[p.REQ_ID],
                               correlation_id=msg[p.REQ_CORRELATION_ID],
                               flags=msg[p.REQ_FLAGS], priority=priority,
                               timeout_us=msg[p.REQ_TIMEOUT_US])
        request._shm_release = lambda: self._inputs_free(rid)  # as _on_infer's
        self._open.add(rid)
        try:
            self._queued[rid] = self._core.model_handle(model, version).queue_made(
                request, msg, batch_size, lambda response: self._answered(rid, response))
        except Exception as err:
            self._fail(rid, model, request, err, "request")

    def _answered(self, rid: int, response: InferResponse) -> None:
        self._queued.pop(rid, None)
        if response.answered:  # the stub answered the frontend, which frees the inputs
            self._open.discard(rid)
            self._inputs_read.discard(rid)
            return
        try:  # called from the model's messages: its other requests must not fail
            self._send(rid, response)
        except Exception:
            log.exception("the answer to frontend %s failed", self.name)

    def _ended(self, rid: int) -> None:
        """A request's task ended; without a final response (cancelled), its inputs'
        end is told by INPUTS_DONE, now if it came already."""
        self._tasks.pop(rid, None)
        if rid in self._open:
            self._open.discard(rid)
            if rid in self._inputs_read:
                self._inputs_read.discard(rid)
                self._tell(fp.inputs_done(rid))

    async def _unary(self, rid: int, model: str, version: str, request: InferRequest,
                     descs: tuple) -> None:
        try:
            handle = self._core.model_handle(model, version)
            response = await handle.infer(request, descs)
        except asyncio.CancelledError:
            request.release_shm()  # a no-op once queued: the request tells it when done
            raise
        except Exception as err:
            self._fail(rid, model, request, err, "request")
            return
        request.release_shm()
        self._send(rid, response)

    async def _stream(self, rid: int, model: str, version: str, request: InferRequest,
                      descs: tuple) -> None:
        final = False
        try:
            handle = self._core.model_handle(model, version)
            stream = handle.stream_infer(request, descs)
            async with contextlib.aclosing(stream):  # type: ignore[type-var]
                async for response in stream:
                    final = response.final
                    if final:
                        request.release_shm()
                    self._send(rid, response)
        except asyncio.CancelledError:
            request.release_shm()
            raise
        except Exception as err:
            self._fail(rid, model, request, err, "stream")
            return
        if not final:
            request.release_shm()
            self._send_error(rid, model, request.id,
                             ServerError(ErrorCode.INTERNAL, "stream ended without a final "
                                         "response"))

    def _on_cancel(self, message: tuple) -> None:
        _, rid = message
        task = self._tasks.get(rid)
        if task is not None:
            task.cancel()
        cancel = self._queued.pop(rid, None)
        if cancel is not None:
            cancel()

    def _on_release(self, message: tuple) -> None:
        _, tokens = message
        self._release(tokens)

    def _release(self, tokens: tuple) -> None:
        held = self._held
        for token in tokens:
            response = held.pop(token, None)
            if response is not None:
                response.release()

    def _on_call(self, message: tuple) -> None:
        _, call_id, method, args = message
        self._calls.run(self._core, method, args,
                        lambda error, value: self._reply(call_id, error, value))

    def _reply(self, call_id: int, error: tuple | None, value: Any) -> None:
        self._tell(fp.reply(call_id, error, value))

    # -- outgoing ---------------------------------------------------------------------
    def _inputs_free(self, rid: int) -> None:
        """The request's inputs are read by no process any more: its frontend may free
        them (told with its final response when that is still to be sent)."""
        if rid in self._open:
            self._inputs_read.add(rid)  # the final response says it
        else:
            self._tell(fp.inputs_done(rid))

    def _tell(self, message: tuple) -> None:
        if not self._gone:
            self.channel.send(message)

    def _send(self, rid: int, response: InferResponse, raised: bool = False) -> None:
        """`raised`: the error was raised before the model (the frontend raises it)."""
        if self._gone:
            response.release()
            return
        error = response.error
        outputs: list[tuple] = []
        token = NO_TOKEN
        if error is None and response.outputs:
            outputs, response = self._outputs(response)
            if response._release is not None:
                token = next(self._tokens)
                self._held[token] = response
        elif response._release is not None:
            response.release()
        done = False
        if response.final:
            self._open.discard(rid)
            done = rid in self._inputs_read
            self._inputs_read.discard(rid)
        params = json.dumps(response.parameters) if response.parameters else "{}"
        wire_error: tuple | None = None
        if error is not None:  # a third field: raised before the model
            wire_error = (int(error.code), error.message, True) if raised \
                else (int(error.code), error.message)
        message = fp.response(rid, token, response.model_name, response.model_version,
                              response.id, tuple(outputs), params, wire_error,
                              response.final, done)
        try:
            self.channel.send(message)
        except ValueError as err:  # outputs in process memory too large for the queue
            self._on_release((fp.RELEASE, (token,)))
            self.channel.send(fp.response(
                rid, NO_TOKEN, response.model_name, response.model_version, response.id,
                (), "{}", (int(ErrorCode.INTERNAL), str(err)), response.final, done))

    def _outputs(self, response: InferResponse) -> tuple[list[tuple], InferResponse]:
        """The outputs' descriptors (a response whose outputs are in process memory and
        too large for a message first has them copied into the core's pool)."""
        descs = {d[0]: d for d in response._descs}
        inline = sum(len(memoryview(t.data).cast("B")) for t in response.outputs
                     if t.shm is None and t.name not in descs)
        if inline > INLINE_MAX and self._in_core_blocks is not None:
            copied = self._in_core_blocks(response)
            response.release()  # its outputs are in the core's pool now
            response = copied
            descs = {d[0]: d for d in response._descs}
        outputs = []
        for t in response.outputs:
            shape = tuple(t.shape)
            if t.shm is not None:
                outputs.append((t.name, t.datatype, shape, fp.OUT_CLIENT_SHM, t.shm.token,
                                (t.shm.offset, t.shm.byte_size)))
            elif (desc := descs.get(t.name)) is not None:
                outputs.append((t.name, t.datatype, shape, fp.OUT_BLOCK, desc[3],
                                (desc[4], desc[5])))
            else:
                outputs.append((t.name, t.datatype, shape, fp.OUT_INLINE, bytes(t.data), 0))
        return outputs, response

    def _fail(self, rid: int, model: str, request: InferRequest, err: Exception,
              what: str) -> None:
        """The request ended with `err` before the model answered it: its inputs are
        told free (unless it was queued: its PendingRequest tells), and the frontend
        raises the error. One that is no ServerError is a fault of the server's own:
        logged, and INTERNAL (the client must not hang). In an `except` block."""
        if not isinstance(err, ServerError):
            log.exception("%s for model '%s' from frontend %s failed", what, model, self.name)
            err = ServerError(ErrorCode.INTERNAL, str(err))
        request.release_shm()
        self._send_error(rid, model, request.id, err)

    def _send_error(self, rid: int, model: str, request_id: str, error: ServerError) -> None:
        self._send(rid, InferResponse(model, "", request_id, error=error), raised=True)

    # -- the frontend is gone ---------------------------------------------------------------
    async def close(self) -> None:
        """The frontend process ended: cancel its requests (the models see it) and wait
        for them, release what it held, and unmap its regions here and in the stubs."""
        self._gone = True
        self.channel.stop()
        for cancel in list(self._queued.values()):
            cancel()
        self._queued.clear()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for response in self._held.values():
            response.release()
        self._held.clear()


INLINE_MAX = 64 << 10  # bytes of outputs in process memory that go in the message
