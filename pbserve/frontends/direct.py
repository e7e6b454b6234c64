"""A frontend process sending a model's requests to the model's stubs itself, and reading
their answers itself: the core out of the data path (docs/frontend_processes.md).

The core says which models qualify and where their stubs' queues are (`direct_route`,
Model.direct_route), kept ROUTE_TTL_S. A request is validated here as the core would
(the model's config), its inputs placed in this process's pool, and an EXECUTE of one
request put on the queue of the instance with the fewest of this frontend's requests
outstanding; the stub's bell posted when that queue was empty (stub/inbox.py). The stub
answers on this frontend's answer queue and rings this frontend's doorbell (its slot's,
the one the core rings: frontends/slots.py); `drain` reads every stub's answers then.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from backend_utils.constants import TRITONSERVER_RESPONSE_COMPLETE_FINAL as RESPONSE_FINAL
from pbserve.core.latency.hop import EXPECT_EVERY_NS
from pbserve.core.latency.queue_watch import QueueWatch
from pbserve.core.latency.spare_cpu import MACHINE
from pbserve.core.observability.response_stats import (
    CANCEL, EMPTY, FAIL, SUCCESS, ResponseStats)
from pbserve.core.scheduling.equal_inputs import EqualInputs
from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.core.validation import RequestValidator
from pbserve.errors import ErrorCode, ServerError, unavailable
from pbserve.frontends import protocol as fp
from pbserve.frontends.owed import Owed
from pbserve.frontends.placer import blocks_of
from shm import Block, Pool
from shm.pool import RegionMap
from shm.queue import QueueFull
from stub import protocol as p
from stub.direct_counts import DirectCounts
from stub.errors import RESCHEDULE_UNSUPPORTED
from stub.frontends import KEY_SHIFT, first_key, origin_of
from stub.peer import StubPeer

log = logging.getLogger("pbserve.frontends")
ROUTE_TTL_S = 1.0
ANSWER_WATCH_NS = 1_000_000  # a lone request's answer is polled for this long
KEYS_SPREAD = 1 << (KEY_SHIFT - 2)  # where a frontend's keys start, at random below this
STATS_INTERVAL_S = 0.1  # what direct requests add to statistics goes to the core so often


class DirectStub(StubPeer):
    """One stub, as this frontend reaches it; `pidfd` becomes readable when it ends."""

    def __init__(self, requests: str, answers: str, bell: str, pid: int,
                 instance: str) -> None:
        super().__init__(requests, answers, bell, pid, instance)
        self.outstanding = 0  # this frontend's requests it has not answered
        self.frees = Owed(self._release)  # its output blocks written, to give back
        self.watch: QueueWatch | None = None  # for a lone request's answer (DirectPath)
        self.announced_ns = -(2**62)  # when it was last told a request is coming

    def _release(self, frees: tuple) -> None:
        try:
            self.send(p.release(frees))
        except QueueFull:
            self.frees.restore(frees)

    def announce(self) -> None:
        """Tell the stub a request is coming (an empty message): it wakes and polls for
        it while this process still decodes it, and polls for its BLS answers (as the
        core's Hop.announce, stub/stub.py `_expect_request`). Not while a message of
        this frontend waits unread, nor more often than the stub polls for one."""
        now = time.monotonic_ns()
        if now - self.announced_ns > EXPECT_EVERY_NS and not self.requests.pending():
            self.announced_ns = now
            try:
                if self.requests.wake():
                    self.bell.release()
            except QueueFull:
                pass

    def close(self) -> None:
        """What this frontend still owes the stub is given back first (a stub that
        unloads waits for it: stub/frontends.py `reading`)."""
        frees = self.frees.take()
        self.frees.drop()
        if frees and self.pidfd >= 0:
            try:
                self.send(p.release(frees))
            except (QueueFull, OSError):
                pass  # (the stub is gone, or does not read)
        super().close()
        self.answers.close()


class DirectRoute:
    """A model whose requests go to its stubs directly (to its one stub's own batcher:
    `batched`, stub/batcher.py); or whose requests the core schedules and its stubs
    answer here (`scheduled`: a dynamic batcher's); or an ensemble this frontend runs
    itself (`ensemble`: its EnsembleRequests, frontends/ensembles.py; no stubs)."""

    def __init__(self, version: str, config: mc.ModelConfig, stubs: list[DirectStub],
                 ensemble: Any = None, scheduled: bool = False, batched: bool = False
                 ) -> None:
        self.version = version
        self.scheduled = scheduled
        self.batched = batched
        # the core only queues the stub's message made here (QUEUE: DirectPath.stub_message);
        # not where a dynamic batcher compares the inputs' shapes (it needs the request's).
        # (A route outlives a reload by ROUTE_TTL_S at most: the requests it sends meanwhile
        # passed the old config's validation, fixed dims and all inputs, so they agree.)
        self.queues_made = scheduled and (config.HasField("sequence_batching")
                                          or not EqualInputs(config).needed)
        self.validator = RequestValidator(config)
        self.output_names = tuple(o.name for o in config.output)
        self.decoupled = config.model_transaction_policy.decoupled
        self.stubs = stubs
        self.ensemble = ensemble
        # an ensemble's first steps' models (announced as its requests come)
        self.first_steps: tuple[tuple[str, str], ...] = \
            ensemble.first_steps if ensemble is not None else ()


class _Waiting:
    """A direct request until its final answer: where its responses go (a future, or a
    stream's queue), its input blocks, and what its statistics need."""

    __slots__ = ("future", "queue", "blocks", "stub", "model", "version", "request_id",
                 "size", "arrived_ns", "sent_ns", "last_ns", "compute_ns",
                 "responses", "left")

    def __init__(self, stream: bool, blocks: list[Block], stub: DirectStub, model: str,
                 version: str, request_id: str) -> None:
        loop = asyncio.get_running_loop()
        self.future: asyncio.Future | None = None if stream else loop.create_future()
        self.queue: asyncio.Queue | None = asyncio.Queue() if stream else None
        self.blocks = blocks
        self.stub = stub
        self.model, self.version, self.request_id = model, version, request_id
        self.size = 1  # its batch size (1 for a model that does not batch)
        self.arrived_ns = self.sent_ns = self.last_ns = 0
        self.compute_ns = 0  # a decoupled model's: until its `execute` returned
        self.responses = 0  # a stream's responses so far
        self.left = False  # its reader is gone (the client left)

    def deliver(self, response: InferResponse) -> None:
        """To its reader; given back at once if the reader is gone."""
        if self.queue is not None:
            if self.left:
                response.release()
            else:
                self.queue.put_nowait(response)
        elif not self.future.done():
            self.future.set_result(response)
        else:
            response.release()


class DirectPath:
    """This frontend's routes, the stubs it reaches, and its requests in flight to them.
    `ask(method, *args)`: a call to the core (LinkedCore._ask), `ask_later`: one the
    loop does not wait for (LinkedCore._ask_async); `ensemble(name, version, config)`:
    the requests of an ensemble the core lets this frontend run."""

    def __init__(self, slot: int, pool: Pool, regions: RegionMap,
                 ask: Callable[..., Any], ask_later: Callable[..., Awaitable[Any]],
                 tell: Callable[[tuple], None],
                 ensemble: Callable[[str, str, mc.ModelConfig], Any] | None = None,
                 answered: Callable[[DirectStub, int, tuple], None] | None = None
                 ) -> None:
        """`answered(stub, key, msg)`: a stub's answer to a request of this frontend the
        core scheduled (LinkedCore: its key is one of `next_key`)."""
        self._slot = slot
        self._ask_later = ask_later
        self._ending: set[asyncio.Task] = set()  # _fail_held's
        self._ensemble = ensemble
        self._answered = answered
        self._tell = tell
        self._stats = DirectCounts()  # not told yet
        # (model, version) -> a decoupled model's response statistics not told yet
        self._response_stats: dict[tuple[str, str], ResponseStats] = {}
        self._stats_scheduled = False
        self._pool = pool
        self._regions = regions
        self._ask = ask
        self._routes: dict[tuple[str, str], tuple[float, DirectRoute | None]] = {}
        self._stubs: dict[tuple[str, str, str], DirectStub] = {}
        # from a random point of its key space: a process started again in the slot does
        # not reuse the keys of its predecessor's requests that may still run
        self._keys = itertools.count(first_key(origin_of(slot)) + random.randrange(KEYS_SPREAD))
        self._waiting: dict[int, _Waiting] = {}
        self._answer_handlers = {
            p.RESPONSES: self._on_responses, p.DROPPED: self._on_responses,
            p.SEND: self._on_send, p.BATCH_DONE: self._on_batch_done,
            p.ANSWERS: self._on_answers,
        }

    def route(self, name: str, version: str) -> DirectRoute | None:
        key = (name, version)
        kept = self._routes.get(key)
        now = time.monotonic()
        if kept is None or kept[0] < now:
            answer = self._ask("direct_route", name, version, self._slot)
            route = None
            if answer is not None:
                model_version, cfg, stubs, scheduled, batched = answer
                config = mc.ModelConfig.FromString(cfg)
                if stubs is None:  # an ensemble: run here, or through the core
                    if self._ensemble is not None:
                        route = DirectRoute(model_version, config, [], self._ensemble(
                            name, model_version, config))
                else:
                    try:
                        route = DirectRoute(model_version, config,
                                            [self._stub(tuple(s)) for s in stubs],
                                            scheduled=scheduled, batched=batched)
                    except OSError:  # a stub ended meanwhile (its names are gone)
                        route = None
            kept = self._routes[key] = (now + ROUTE_TTL_S, route)
        return kept[1]

    def next_key(self) -> int:
        """A request key of this frontend's (the stubs answer it: stub/frontends.py)."""
        return next(self._keys)

    def busy(self) -> bool:
        """Whether a direct request is in flight."""
        return bool(self._waiting)

    def announce(self, route: DirectRoute) -> None:
        """A request for `route` is coming and none is in flight: where the machine has
        CPU to spare, the stub it will go to is told (DirectStub.announce); for an
        ensemble, those of its first steps' models."""
        if self._waiting or not MACHINE.spare():
            return
        if route.stubs:
            min(route.stubs, key=lambda s: s.outstanding).announce()
        for name, version in route.first_steps:
            first = self.route(name, version)
            if first is not None and first.stubs and not first.scheduled:
                min(first.stubs, key=lambda s: s.outstanding).announce()

    def _stub(self, names: tuple) -> DirectStub:
        stub = self._stubs.get(names)
        if stub is None:
            stub = self._stubs[names] = DirectStub(*names)
            asyncio.get_running_loop().add_reader(stub.pidfd, self._stub_ended, names)
        return stub

    def _stub_ended(self, names: tuple) -> None:
        """A stub ended (it died, or its model was unloaded): no route names it any more,
        and what waits for it fails, as the core fails what a dead stub held (once the
        core has seen the end too: `_fail_held`)."""
        stub = self._stubs.pop(names)
        loop = asyncio.get_running_loop()
        loop.remove_reader(stub.pidfd)
        self._routes.clear()
        self._drain(stub)  # what it answered before it ended
        held = [(key, waiting) for key, waiting in self._waiting.items()
                if waiting.stub is stub]
        if not held:
            stub.close()
            return
        task = loop.create_task(self._fail_held(stub, held))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def _fail_held(self, stub: DirectStub, held: list[tuple[int, _Waiting]]) -> None:
        """`held` fails once the core has seen the stub end too (Model.stub_ended): a
        client that sends again when it has its error finds the instance restarting (its
        request waits for the new stub), as with one process, not the dead stub's route,
        which the core would still give this frontend."""
        first = held[0][1]
        try:
            await self._ask_later("stub_ended", first.model, first.version, stub.instance,
                                  stub.pid)
        except Exception:  # noqa: BLE001 - (the model is gone, the core stops): fail now
            pass
        finally:
            for key, waiting in held:
                if self._waiting.get(key) is waiting:
                    self._fail(key, waiting, (
                        f"Stub process '{stub.instance}' is not healthy: it exited while "
                        f"model '{waiting.model}' was running"))
            stub.close()

    def _fail(self, key: int, waiting: _Waiting, error: str,
              code: ErrorCode = ErrorCode.INTERNAL) -> None:
        """Request `key` ends with `error` (its stub ended, its batch failed)."""
        del self._waiting[key]
        waiting.stub.outstanding -= 1
        self._free(waiting.blocks)
        waiting.deliver(InferResponse(waiting.model, waiting.version, waiting.request_id,
                                      error=ServerError(code, error)))
        self._count(waiting, True)

    def _send(self, route: DirectRoute, request: InferRequest, stream: bool,
              lent: tuple | None = None) -> tuple[int, _Waiting]:
        """The request validated, placed and sent to the instance with the fewest of
        this frontend's requests outstanding: its key, and where its answers go.
        `lent`: stub_message's."""
        arrived_ns = time.monotonic_ns()
        key = next(self._keys)
        blocks, msg, batch = self.stub_message(route, request, key, lent)
        stub = min(route.stubs, key=lambda s: s.outstanding)
        frees = stub.frees.take()
        try:
            stub.send(p.queued(key, msg, batch or 1, arrived_ns, frees) if route.batched
                      else p.execute(key, (msg,), frees))
        except QueueFull:
            stub.frees.restore(frees)
            self._free(blocks)
            raise unavailable("the model's instance has too many requests waiting") from None
        waiting = self._waiting[key] = _Waiting(stream, blocks, stub, request.model_name,
                                                route.version, request.id)
        waiting.arrived_ns, waiting.sent_ns = arrived_ns, time.monotonic_ns()
        waiting.size = batch or 1
        stub.outstanding += 1
        if len(self._waiting) == 1 and MACHINE.spare():  # a lone request, an idle machine
            self.watch(stub)
        return key, waiting

    def stub_message(self, route: DirectRoute, request: InferRequest, key: int,
                     lent: tuple | None = None) -> tuple[list[Block], tuple, int]:
        """The request validated as the core would, its inputs placed in this process's
        pool, and its message for the stub (stub/protocol.py request_msg) under `key`:
        the blocks placed, the message, the batch size. `lent`: where its inputs lie in
        shm already (an ensemble step's: its earlier steps' outputs, kept by the
        ensemble until this step is done), by input; one with no region ("") is placed
        as any request's. Raises what validation raises."""
        batch = route.validator.validate(request)
        # (none is in a client region: such requests go through the core)
        inputs = request.inputs
        if lent is None:
            blocks = [b for b in blocks_of(inputs, self._pool) if b is not None]
            where = [(b.region, b.offset, b.nbytes) for b in blocks]
        else:
            blocks, where = self._place_unlent(inputs, lent)
        model_shape = route.validator.model_shape
        descs = tuple((t.name, t.datatype, model_shape(t, batch), *w)
                      for t, w in zip(inputs, where))
        msg = p.request_msg(
            key=key, request_id=request.id, correlation_id=request.correlation_id,
            flags=request.flags,
            parameters_json=json.dumps(request.parameters) if request.parameters else "{}",
            timeout_us=request.timeout_us,
            requested=tuple(request.requested_outputs or route.output_names),
            inputs=descs, lendable=False, output_shm=None)
        return blocks, msg, batch

    def _place_unlent(self, inputs: list[TensorData], lent: tuple
                      ) -> tuple[list[Block], list[tuple]]:
        """The blocks placed for the inputs `lent` has no region for, and each input's
        (region, offset, nbytes)."""
        unlent = [t for t, desc in zip(inputs, lent) if not desc[3]]
        blocks = [b for b in blocks_of(unlent, self._pool) if b is not None] \
            if unlent else []
        placed = iter(blocks)
        where = []
        for desc in lent:
            if desc[3]:
                where.append(desc[3:6])
            else:
                block = next(placed)
                where.append((block.region, block.offset, block.nbytes))
        return blocks, where

    def watch(self, stub: DirectStub) -> None:
        """Poll the stub's answer queue for a while (as LinkedCore watches the core's
        answer: latency/queue_watch.py), so that a short model's answer is read without
        the doorbell's wake-up of an idle loop."""
        if stub.watch is None:
            stub.watch = QueueWatch(asyncio.get_running_loop(), stub.answers.pending,
                                    self.drain, lambda: stub.pidfd >= 0)
        stub.watch.extend(ANSWER_WATCH_NS)

    async def infer(self, route: DirectRoute, request: InferRequest,
                    lent: tuple | None = None) -> InferResponse:
        key, waiting = self._send(route, request, False, lent)
        assert waiting.future is not None
        try:
            return await waiting.future
        except asyncio.CancelledError:  # the client left: the model is told (the core
            # passes it on: its BLS calls too); the answer is released when it comes
            self._leave(key, waiting)
            raise

    async def stream_infer(self, route: DirectRoute, request: InferRequest,
                           lent: tuple | None = None) -> AsyncIterator[InferResponse]:
        """The request's responses, the final one last (a decoupled model's stream)."""
        key, waiting = self._send(route, request, True, lent)
        queue = waiting.queue
        assert queue is not None
        final = False
        try:
            while not final:
                response = await queue.get()
                final = response.final
                yield response
        finally:
            if not final:
                self._leave(key, waiting)

    def _leave(self, key: int, waiting: _Waiting) -> None:
        """The request's reader is gone: the model is told (through the core, which
        cancels its BLS calls too); what came and was not read, and what comes, is
        given back."""
        waiting.left = True
        if key in self._waiting:
            self._tell(fp.cancel_direct(waiting.model, waiting.version,
                                        waiting.stub.instance, key))
        while waiting.queue is not None and not waiting.queue.empty():
            waiting.queue.get_nowait().release()

    # -- the stubs' answers ---------------------------------------------------------------
    def drain(self) -> None:
        """Every stub's answers to this frontend (on its doorbell)."""
        for stub in self._stubs.values():
            self._drain(stub)

    def _drain(self, stub: DirectStub) -> None:
        get = stub.answers.get
        while (raw := get(0)) is not None:
            self._on_answer(stub, p.decode(raw))

    def _on_answer(self, stub: DirectStub, message: tuple) -> None:
        self._answer_handlers[message[0]](stub, message)

    def _on_responses(self, stub: DirectStub, message: tuple) -> None:
        """RESPONSES or DROPPED: a model that is not decoupled answered (or the stub
        did not run the request)."""
        kind, batch_id, error, responses, rescheduled = message
        if batch_id in rescheduled and error is None:
            self._rescheduled(batch_id)
            return
        waiting = self._waiting.pop(batch_id, None)
        if waiting is None:
            return
        self._answered_here(stub, waiting, [msg for _, msg in responses], error)
        # execute raised, or did not run (an error response of the model's succeeds)
        self._count(waiting, error is not None or kind == p.DROPPED)

    def _on_answers(self, stub: DirectStub, message: tuple) -> None:
        """The responses of requests in a batch of the stub's own batcher (this
        frontend's, stub/batcher.py: the stub counted them), and of requests the core
        scheduled and sent this stub in a batch (stub.py `_answer_frontends`): to
        LinkedCore, which sent them."""
        _, entries = message
        answered = self._answered
        for key, msg in entries:
            waiting = self._waiting.pop(key, None)
            if waiting is not None:
                self._answered_here(stub, waiting, [msg])
            elif answered is not None:
                answered(stub, key, msg)
            else:
                stub.frees.add(p.output_blocks(msg[p.RESP_OUTPUTS]))

    def _answered_here(self, stub: DirectStub, waiting: _Waiting, msgs: list,
                       error: str | None = None) -> None:
        """The final answer to a request of a model that is not decoupled (taken off
        `_waiting`): its response, made of `msgs` (ResponseMsgs, or None), or `error`
        (its batch's), delivered; its inputs freed (`execute` has returned: no one
        reads them now)."""
        stub.outstanding -= 1
        self._free(waiting.blocks)
        response = InferResponse(waiting.model, waiting.version, waiting.request_id)
        if error is not None:
            response.error = ServerError(ErrorCode.INTERNAL, error)
        for msg in msgs:
            if msg is not None:
                self.read(stub, msg, response)
        waiting.deliver(response)

    def _on_send(self, stub: DirectStub, message: tuple) -> None:
        """A decoupled model's response (its final flag, with or without one)."""
        _, key, msg, flags = message
        waiting = self._waiting.get(key)
        if waiting is None:  # an answer after the request ended (its stub's death)
            if msg is not None:
                stub.frees.add(p.output_blocks(msg[p.RESP_OUTPUTS]))
            return
        arrived_ns = time.monotonic_ns()
        final = bool(flags & RESPONSE_FINAL)
        response = InferResponse(waiting.model, waiting.version, waiting.request_id,
                                 final=final)
        if msg is not None:
            self.read(stub, msg, response)
        waiting.deliver(response)
        self._count_response(waiting, response, arrived_ns)
        if final:
            del self._waiting[key]
            stub.outstanding -= 1
            self._free(waiting.blocks)  # the model has let the request go
            self._count(waiting, False)  # its own error responses do not fail it

    def _on_batch_done(self, stub: DirectStub, message: tuple) -> None:
        """A decoupled model's `execute` returned (its compute time, as the core counts
        it, unless the final response came first), raised (its request fails), or
        released the request with RESCHEDULE."""
        _, batch_id, error, rescheduled = message
        waiting = self._waiting.get(batch_id)
        if waiting is None:
            return
        waiting.compute_ns = time.monotonic_ns() - waiting.sent_ns
        if error is not None:
            self._fail(batch_id, waiting, error)
        elif batch_id in rescheduled:
            self._rescheduled(batch_id)

    def _rescheduled(self, key: int) -> None:
        """The model released request `key` with RESCHEDULE, which only an iterative
        sequence batcher takes: refused as the default scheduler refuses it."""
        waiting = self._waiting.get(key)
        if waiting is not None:
            self._fail(key, waiting, RESCHEDULE_UNSUPPORTED, ErrorCode.INVALID_ARG)

    def _count_response(self, waiting: _Waiting, response: InferResponse,
                        arrived_ns: int) -> None:
        """A decoupled model's response statistics (ResponseStats), as the core counts
        them (ModelAccounting.responded)."""
        key = (waiting.model, waiting.version)
        stats = self._response_stats.get(key)
        if stats is None:
            stats = self._response_stats[key] = ResponseStats()
        outcome = CANCEL if waiting.left else FAIL if response.error is not None \
            else SUCCESS if response.outputs else EMPTY
        now = time.monotonic_ns()
        stats.add(waiting.responses, outcome,
                  max(arrived_ns - (waiting.last_ns or waiting.sent_ns), 0), now - arrived_ns)
        waiting.responses += 1
        waiting.last_ns = now
        self._stats_due()

    def _count(self, waiting: _Waiting, failed: bool) -> None:
        now = time.monotonic_ns()
        self.count(waiting.model, waiting.version, waiting.size, failed,
                   now - waiting.arrived_ns, waiting.compute_ns or now - waiting.sent_ns)

    def count(self, model: str, version: str, size: int, failed: bool, took_ns: int,
              compute_ns: int) -> None:
        """A request this frontend ran without the core (sent to a stub; or an
        ensemble's, compute its steps'): told to the core with the next figures."""
        self._stats.add(model, version, size, failed, took_ns, compute_ns)
        self._stats_due()

    def count_cancelled(self, model: str, version: str, size: int) -> None:
        """An ensemble's request whose client left (DirectCounts.cancelled)."""
        self._stats.cancelled(model, version, size)
        self._stats_due()

    def _stats_due(self) -> None:
        if not self._stats_scheduled:
            self._stats_scheduled = True
            asyncio.get_running_loop().call_later(STATS_INTERVAL_S, self.flush_stats)

    def flush_stats(self) -> None:
        """Tell the core what direct requests added to statistics (also before this
        frontend asks it for statistics: the core reads the channel in order)."""
        self._stats_scheduled = False
        if self._stats or self._response_stats:
            responses = tuple((*key, stats.figures())
                              for key, stats in self._response_stats.items())
            self._response_stats.clear()
            self._tell(fp.direct_stats(self._stats.take(), responses))

    def read(self, stub: DirectStub, msg: tuple, response: InferResponse) -> None:
        """A ResponseMsg into `response`; one this process cannot read becomes its
        error (its request fails, no other)."""
        try:
            self._read_msg(stub, msg, response)
        except Exception as exc:  # noqa: BLE001 - its request fails, no other
            log.exception("an answer of model instance '%s' could not be read",
                          stub.instance)
            response.outputs = []
            response.error = ServerError(ErrorCode.INTERNAL, (
                f"the response of model instance '{stub.instance}' could not be "
                f"read: {exc}"))

    def _read_msg(self, stub: DirectStub, msg: tuple, response: InferResponse) -> None:
        error, outputs, params = msg
        if error is not None:
            stub.frees.add(p.output_blocks(outputs))
            response.error = ServerError(ErrorCode(error[0]), error[1])
            return
        view = self._regions.view
        response.outputs = [TensorData(name, datatype, shape, view(region, offset, nbytes))
                            for name, datatype, shape, region, offset, nbytes in outputs]
        response._descs = outputs  # where they lie (an ensemble's next steps read there)
        if params and params != "{}":
            response.parameters = json.loads(params)
        if outputs:
            # written: back to the stub with the next request, or by a RELEASE (owed.py)
            response._release = lambda: stub.frees.add(p.output_blocks(outputs))

    def _free(self, blocks: list[Block]) -> None:
        for block in blocks:
            self._pool.free(block.region, block.offset)

    def close(self) -> None:
        for task in self._ending:
            task.cancel()
        for stub in self._stubs.values():
            try:
                asyncio.get_running_loop().remove_reader(stub.pidfd)
            except RuntimeError:  # no loop runs any more
                pass
            stub.close()
        self._stubs.clear()
