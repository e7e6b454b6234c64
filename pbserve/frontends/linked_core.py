"""A frontend process's InferenceCore: the core process, reached over the channel.

A request's inputs go into this process's own shm pool (a large body is gathered there
as it arrives: `input_placer`), and only their descriptors go to the core, which passes
them on to the stub; the blocks are freed once the core says no process reads them. A
response's outputs are viewed where they are (a stub's pool, the core's) and given back
when the frontend has written them (with its next request, or a RELEASE: owed.py).

What the protocol has as plain methods (metadata, config, the index, a model's handle,
client shm registration) is a call the loop waits for (`_ask`): the core answers from
its loop at once, and the frontend reads other messages meanwhile. A model's handle is
kept HANDLE_TTL_S (a model reloaded with another transaction policy through another
frontend is seen within that; the core refuses what no longer fits anyway).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.ensemble.requests import EnsembleRequests
from pbserve.core.latency.spare_cpu import MACHINE
from pbserve.core.observability.log_settings import SERVER_LOG, LogSettings
from pbserve.core.types import InferRequest, InferResponse, ShmRef, TensorData
from pbserve.errors import ErrorCode, ServerError, unavailable
from pbserve.frontends import protocol as fp
from pbserve.frontends.channel import FrontendEnd
from pbserve.frontends.direct import ANSWER_WATCH_NS, DirectPath, DirectRoute, DirectStub
from pbserve.frontends.ensembles import frontend_ensemble
from pbserve.frontends.owed import Owed
from pbserve.frontends.placer import FrontendPlacer, blocks_of
from shm import Block, Pool
from shm.pool import RegionMap
from stub import protocol as p

ANSWER_TIMEOUT_S = 30.0  # a call the core does not answer within this fails
HANDLE_TTL_S = 1.0
TRIM_INTERVAL_S = 1.0


class _Call:
    """One request on its way: where its responses go, its input blocks, and, for one
    its stub may answer here (`LinkedCore._on_stub_answer`), the model, version and
    request id its response names."""

    __slots__ = ("future", "queue", "blocks", "closed", "answer_as")

    def __init__(self, stream: bool, blocks: list[Block],
                 answer_as: tuple[str, str, str] | None) -> None:
        loop = asyncio.get_running_loop()
        self.future: asyncio.Future | None = None if stream else loop.create_future()
        self.queue: asyncio.Queue | None = asyncio.Queue() if stream else None
        self.blocks = blocks
        self.closed = False  # its reader is gone (answered, or cancelled)
        self.answer_as = answer_as

    def deliver(self, response: InferResponse) -> None:
        """To its reader (a unary one's answered already: given back)."""
        if self.future is not None:
            if not self.future.done():
                self.future.set_result(response)
            else:
                response.release()
        else:
            assert self.queue is not None
            self.queue.put_nowait(response)


class LinkedCore:
    """InferenceCore for a frontend process (the protocol: core/api.py)."""

    def __init__(self, channel: FrontendEnd, pool: Pool, slot: int = 0) -> None:
        self._channel = channel
        self._pool = pool
        self._placer = FrontendPlacer(pool)
        self._regions = RegionMap()
        self._rids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._calls: dict[int, _Call] = {}
        self._inputs: dict[int, list[Block]] = {}  # requests whose inputs the core reads
        self._answers: dict[int, asyncio.Future] = {}
        self._sync_answers: dict[int, tuple] = {}
        self._sync_waits: set[int] = set()  # calls `_ask` waits for
        # tokens of responses written, not yet told (with the next request, or RELEASE)
        self._releases = Owed(lambda tokens: self._channel.send(fp.release(tokens)))
        self._handles: dict[tuple[str, str], tuple[float, bool, bool]] = {}
        self._applying_core_log = False
        self._trim: asyncio.TimerHandle | None = None
        self.shared_memory = _SharedMemory(self)
        self.direct = DirectPath(slot, pool, self._regions, self._ask, self._ask_async,
                                 self._channel.send, self._ensemble, self._on_stub_answer)
        self._handlers: dict[int, Callable[[tuple], None]] = {
            fp.RESPONSE: self._on_response, fp.INPUTS_DONE: self._on_inputs_done,
            fp.REPLY: self._on_reply, fp.FORGET_REGIONS: self._on_forget_regions,
            fp.TRIM: self._on_trim, fp.LOG_SETTINGS: self._on_log_settings,
        }

    def start(self) -> None:
        self._channel.start(self._on_messages, self.direct.drain)
        SERVER_LOG.attach(self)
        self._trim = asyncio.get_running_loop().call_later(TRIM_INTERVAL_S, self._tick)

    def close(self) -> None:
        SERVER_LOG.detach(self)
        self.direct.close()
        if self._trim is not None:
            self._trim.cancel()
        self._channel.close()
        self._regions.close()
        self._pool.close()

    def serving(self) -> None:
        """This process serves its endpoints now: the core may say it is ready."""
        self._channel.send(fp.started())

    # -- the protocol's plain calls -----------------------------------------------------
    def is_live(self) -> bool:
        return True

    async def is_ready(self) -> bool:
        return await self._ask_async("is_ready")

    def server_metadata(self) -> dict[str, Any]:
        return self._ask("server_metadata")

    async def model_ready(self, name: str, version: str = "") -> bool:
        return await self._ask_async("model_ready", name, version)

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return self._ask("model_metadata", name, version)

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return self._ask("model_config", name, version)

    def expect(self, name: str, version: str) -> None:
        if self._calls:
            return
        direct = self.direct
        if direct.busy():
            return
        route = direct.route(name, version)
        if route is not None and not route.scheduled:  # the core does not see it: the
            # stub is told itself
            direct.announce(route)
            return
        self._channel.send(fp.expect(name, version))

    def input_placer(self) -> FrontendPlacer:
        return self._placer

    def model_handle(self, name: str, version: str = "") -> LinkedModel:
        key = (name, version)
        kept = self._handles.get(key)
        now = time.monotonic()
        if kept is None or kept[0] < now:
            decoupled, batched = self._ask("model_handle", name, version)
            kept = self._handles[key] = (now + HANDLE_TTL_S, decoupled, batched)
        return LinkedModel(self, name, version, kept[1], kept[2])

    def _ensemble(self, name: str, version: str, cfg: mc.ModelConfig) -> EnsembleRequests:
        """The requests of an ensemble this frontend runs itself (DirectPath.route)."""
        direct = self.direct
        return frontend_ensemble(name, version, cfg, self.model_handle, self._pool,
                                 direct.count, direct.count_cancelled)

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return self.model_handle(name, version).decoupled

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return self._ask("repository_index", ready_only)

    async def load_model(self, name: str, config: str | None = None,
                         files: dict[str, bytes] | None = None) -> None:
        self._handles.clear()
        await self._ask_async("load_model", name, config, files)
        self._handles.clear()

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self._handles.clear()
        await self._ask_async("unload_model", name, unload_dependents)
        self._handles.clear()

    async def model_statistics(self, name: str, version: str = "") -> list[dict[str, Any]]:
        self.direct.flush_stats()
        return await self._ask_async("model_statistics", name, version)

    async def metrics_text(self) -> str:  # type: ignore[override]
        self.direct.flush_stats()
        return await self._ask_async("metrics_text")

    async def trace_setting(self, model: str, changes: dict | None) -> dict[str, Any]:
        """Triton's trace settings live where requests are traced: the core."""
        return await self._ask_async("trace_setting", model, changes)

    # -- the log settings (one for the whole server) ------------------------------------
    def apply_log_settings(self, settings: LogSettings) -> None:
        """SERVER_LOG changed here (a client's /v2/logging): the core takes it too, and
        tells the stubs and the other frontends, before the client is answered."""
        if not self._applying_core_log:
            self._ask("log_settings", fp.changeable(settings.as_dict()))

    def _on_log_settings(self, message: tuple) -> None:
        _, settings = message
        self._applying_core_log = True
        try:
            SERVER_LOG.update(settings)
        finally:
            self._applying_core_log = False

    # -- inference ------------------------------------------------------------------------
    def send_request(self, request: InferRequest, stream: bool,
                     route: DirectRoute | None = None) -> tuple[int, _Call]:
        """The request on its way to the core: its id and where its answers go.
        `route`: the model's, when its id is to be a key of this frontend's, whose stub
        may answer it here (a batcher's model: DirectRoute.scheduled)."""
        if route is not None and route.queues_made:
            return self._send_made(request, route)
        placed = blocks_of(request.inputs, self._pool)
        blocks = [block for block in placed if block is not None]
        inputs = []
        for tensor, block in zip(request.inputs, placed):
            shape = tuple(tensor.shape)
            if block is None:  # in a client's region
                ref = tensor.shm
                assert ref is not None
                inputs.append((tensor.name, tensor.datatype, shape, "", 0, 0,
                               (ref.region, ref.offset, ref.byte_size)))
            else:
                inputs.append((tensor.name, tensor.datatype, shape, block.region,
                               block.offset, block.nbytes, None))
        output_shm = tuple((name, ref.region, ref.offset, ref.byte_size)
                           for name, ref in request.output_shm.items()) \
            if request.output_shm else None
        if route is None:
            rid, answer_as = next(self._rids), None
        else:
            rid, answer_as = self.direct.next_key(), (request.model_name, route.version,
                                                      request.id)
        call = self._calls[rid] = _Call(stream, blocks, answer_as)
        self._inputs[rid] = blocks
        requested = tuple(request.requested_outputs) \
            if request.requested_outputs is not None else None
        params = json.dumps(request.parameters) if request.parameters else "{}"
        headers = tuple(request.trace_headers.items()) if request.trace_headers else None
        releases = self._releases.take()
        self._channel.send(fp.infer(
            rid, stream, request.model_name, request.model_version, request.id,
            tuple(inputs), requested, params, request.correlation_id, request.flags,
            request.priority, request.timeout_us, headers, output_shm, releases))
        self._watch_lone(route)
        return rid, call

    def _send_made(self, request: InferRequest, route: DirectRoute) -> tuple[int, _Call]:
        """send_request's, for a request the core only queues: validated and its
        stub's message made here (DirectPath.stub_message), under a key of this
        frontend's; its stub answers it here."""
        rid = self.direct.next_key()
        blocks, msg, batch = self.direct.stub_message(route, request, rid)
        call = self._calls[rid] = _Call(False, blocks, (request.model_name, route.version,
                                                       request.id))
        self._inputs[rid] = blocks
        self._channel.send(fp.queue(request.model_name, request.model_version, batch,
                                    request.priority, msg, self._releases.take()))
        self._watch_lone(route)
        return rid, call

    def _watch_lone(self, route: DirectRoute | None) -> None:
        """A lone request on an idle machine: where its answer comes from is polled for
        it a while, the core's channel, or (`route`'s) whichever of its stubs the core
        sends it to."""
        if len(self._calls) == 1 and MACHINE.spare():
            if route is None:
                self._channel.watch(ANSWER_WATCH_NS)
            else:
                for stub in route.stubs:
                    self.direct.watch(stub)

    async def infer(self, request: InferRequest, route: DirectRoute | None = None
                    ) -> InferResponse:
        """`route`: send_request's."""
        rid, call = self.send_request(request, False, route)
        assert call.future is not None
        try:
            return await call.future
        except asyncio.CancelledError:
            self._leave(rid, call)
            raise

    async def stream_infer(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        rid, call = self.send_request(request, stream=True)
        assert call.queue is not None
        final = False
        try:
            while not final:
                response = await call.queue.get()
                final = response.final
                if isinstance(response, _Raise):
                    raise response.error
                yield response
        finally:
            if not final or not call.queue.empty():
                self._leave(rid, call)

    def _leave(self, rid: int, call: _Call) -> None:
        """The request's reader is gone: the core cancels it (the model sees it), and
        the responses that came and were not read are given back."""
        if not call.closed:
            call.closed = True
            self._calls.pop(rid, None)
            self._channel.send(fp.cancel(rid))
        while call.queue is not None and not call.queue.empty():
            unread = call.queue.get_nowait()
            if isinstance(unread, InferResponse):
                unread.release()

    # -- what the core sends --------------------------------------------------------------
    def _on_messages(self, batch: list) -> None:
        handlers = self._handlers
        for message in batch:
            handlers[message[0]](message)

    def _on_response(self, message: tuple) -> None:
        (_, rid, token, model, version, request_id, outputs, params, error, final,
         inputs_done) = message
        if inputs_done:
            self._free(self._inputs.pop(rid, ()))
        call = self._calls.get(rid)
        if call is None:  # its reader left: nothing to write
            if token:
                self._releases.add((token,))
            return
        if final:
            del self._calls[rid]
            call.closed = True
        if error is not None and len(error) == 3:  # raised before the model: as locally
            exc = ServerError(ErrorCode(error[0]), error[1])
            if call.future is not None:
                call.future.set_exception(exc)
            else:
                assert call.queue is not None
                call.queue.put_nowait(_Raise(exc))
            return
        response = InferResponse(model, version, request_id, final=final)
        if error is not None:
            response.error = ServerError(ErrorCode(error[0]), error[1])
        if outputs:
            response.outputs = [self._tensor(*output) for output in outputs]
        if params != "{}":
            response.parameters = json.loads(params)
        if token:
            response._release = lambda: self._releases.add((token,))
        call.deliver(response)

    def _on_stub_answer(self, stub: DirectStub, rid: int, msg: tuple) -> None:
        """A stub answered request `rid` here itself (DirectPath's ANSWERS): `execute`
        has returned, so its inputs are read no more; the core is told it is done by
        the stub, and answers it no more."""
        self._free(self._inputs.pop(rid, ()))
        call = self._calls.pop(rid, None)
        if call is None or call.answer_as is None:  # its reader left: nothing to write
            stub.frees.add(p.output_blocks(msg[p.RESP_OUTPUTS]))
            return
        call.closed = True
        response = InferResponse(*call.answer_as)
        self.direct.read(stub, msg, response)
        call.deliver(response)

    def _tensor(self, name: str, datatype: str, shape: tuple, where: int, a: Any,
                b: Any) -> TensorData:
        if where == fp.OUT_BLOCK:
            return TensorData(name, datatype, shape, self._regions.view(a, b[0], b[1]))
        if where == fp.OUT_INLINE:
            return TensorData(name, datatype, shape, a)
        return TensorData(name, datatype, shape, b"", ShmRef("", b[0], b[1], a))

    def _on_inputs_done(self, message: tuple) -> None:
        _, rid = message
        self._free(self._inputs.pop(rid, ()))

    def _free(self, blocks: Any) -> None:
        free = self._pool.free
        for block in blocks:
            free(block.region, block.offset)

    def _on_forget_regions(self, message: tuple) -> None:
        _, names = message
        self._regions.drop(names)

    def _on_trim(self, message: tuple) -> None:
        self._gone(self._pool.trim(force=True))

    def _tick(self) -> None:
        self._gone(self._pool.trim())
        self._trim = asyncio.get_running_loop().call_later(TRIM_INTERVAL_S, self._tick)

    def _gone(self, names: list[str]) -> None:
        if names:
            self._channel.send(fp.regions_gone(tuple(names)))

    # -- calls ------------------------------------------------------------------------------
    def _send_call(self, call_id: int, method: str, args: tuple) -> None:
        self._channel.send(fp.call(call_id, method, args))

    def _on_reply(self, message: tuple) -> None:
        _, call_id, error, value = message
        future = self._answers.pop(call_id, None)
        if future is None:
            if call_id in self._sync_waits:  # else its caller was cancelled: dropped
                self._sync_answers[call_id] = (error, value)
            return
        if future.done():
            return
        if error is not None:
            future.set_exception(ServerError(ErrorCode(error[0]), error[1]))
        else:
            future.set_result(value)

    async def _ask_async(self, method: str, *args: Any) -> Any:
        call_id = next(self._call_ids)
        future = self._answers[call_id] = asyncio.get_running_loop().create_future()
        self._send_call(call_id, method, args)
        try:
            return await future
        finally:
            self._answers.pop(call_id, None)

    def _ask(self, method: str, *args: Any) -> Any:
        """A call the loop waits for: the other messages read meanwhile are handled."""
        call_id = next(self._call_ids)
        self._send_call(call_id, method, args)
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        answers = self._sync_answers
        self._sync_waits.add(call_id)
        try:
            while call_id not in answers:
                left = deadline - time.monotonic()
                message = self._channel.get(left) if left > 0 else None
                if message is None:
                    raise unavailable(f"the core did not answer '{method}' within "
                                      f"{ANSWER_TIMEOUT_S:.0f} s")
                self._handlers[message[0]](message)
        finally:
            self._sync_waits.discard(call_id)
        error, value = answers.pop(call_id)
        if error is not None:
            raise ServerError(ErrorCode(error[0]), error[1])
        return value


class _Raise:
    """A stream's error raised before the model (the core raised it): raised to the
    reader, as the local core's stream raises it."""

    __slots__ = ("error",)
    final = True

    def __init__(self, error: ServerError) -> None:
        self.error = error


class LinkedModel:
    """A model of the core, resolved for one request (api.ModelHandle)."""

    __slots__ = ("_core", "_name", "_version", "decoupled", "batched")

    def __init__(self, core: LinkedCore, name: str, version: str, decoupled: bool,
                 batched: bool) -> None:
        self._core = core
        self._name, self._version = name, version
        self.decoupled = decoupled
        self.batched = batched

    def expect(self) -> None:
        """The hint goes to the core when this frontend has no request in flight (an
        idle server: the instance gets ready while the request is decoded); under load
        the instances are busy anyway, and the hint would cost the core a wake-up."""
        self._core.expect(self._name, self._version)

    expect_request = expect  # (an ensemble's StepModel: its next step calls this model)

    def output_labels(self, output: str) -> list[bytes] | None:
        return self._core._ask("output_labels", self._name, self._version, output)

    def _direct_route(self, request: InferRequest) -> DirectRoute | None:
        """The model's direct route (frontends/direct.py), if this request may take it:
        one without a timeout or a client's shared memory (those the core handles)."""
        if request.output_shm is None and not request.timeout_us \
                and all([t.shm is None for t in request.inputs]):
            return self._core.direct.route(self._name, self._version)
        return None

    async def infer(self, request: InferRequest, descs: tuple | None = None
                    ) -> InferResponse:
        """`descs`: where an ensemble step's inputs lie already (EnsembleRun), passed on
        to a stub reached directly; through the core, the inputs are copied."""
        route = self._direct_route(request)
        if route is not None:
            if route.ensemble is not None:
                return await route.ensemble.infer(request, descs)
            if route.scheduled:
                return await self._core.infer(request, route)
            if not route.decoupled:  # (the core refuses a decoupled one)
                return await self._core.direct.infer(route, request, descs)
        return await self._core.infer(request)

    def stream_infer(self, request: InferRequest, descs: tuple | None = None
                     ) -> AsyncIterator[InferResponse]:
        route = self._direct_route(request)
        if route is not None and not route.scheduled:
            if route.ensemble is not None:
                return route.ensemble.stream_infer(request, descs)
            return self._core.direct.stream_infer(route, request, descs)
        return self._core.stream_infer(request)


class _SharedMemory:
    """Clients' regions are registered with the core (any frontend then uses them)."""

    def __init__(self, core: LinkedCore) -> None:
        self._core = core

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method not in fp.SHARED_MEMORY_METHODS:
            raise AttributeError(method)
        return lambda *args: self._core._ask("shared_memory", method, args)
