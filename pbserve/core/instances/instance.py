"""A model instance: the batches and requests its stub runs (in flight until their final
response), and the stub's messages, each kind to its handler. The stub process's life
(launch, restart, stop) is the supervisor's (supervisor.py), responses and the output
blocks owed to the stub are outputs.py's. What happens to its stub is told to its model
(`InstanceEvents`), what happens to its batches to its model's scheduler
(`SchedulerEvents`, events.py) and statistics (`ModelAccounting`)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.instances.events import InstanceEvents, SchedulerEvents
from pbserve.core.instances.outputs import StubOutputs
from pbserve.core.memory.shm_upkeep import ShmUpkeep
from pbserve.core.stub_calls.dispatch import StubCalls
from pbserve.core.instances.stub_launch import StubLauncher
from pbserve.core.instances.stub_process import StubProcess
from pbserve.core.latency.hop import REPLY_WATCH_NS, Hop, RunningInstances
from pbserve.core.instances.supervisor import InstanceSpec, InstanceState, StubSupervisor
from pbserve.core.observability.log_escape import escaped
from pbserve.core.observability.model_stats import ModelAccounting
from pbserve.core.pending import PendingRequest
from pbserve.core.types import InferResponse
from pbserve.errors import ErrorCode, ServerError, internal
from shm.pool import RegionMap, ShmSizes
from stub import protocol as p
from stub.frontends import LAST_PARENT_KEY, origin_of_key

log = logging.getLogger("pbserve.core")

FINAL = 1
_LOG_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}


class ExecutionLimit(Protocol):
    """The instance's place in the rate limiter (scheduling/rate_limiter.py
    `InstanceLimit`, under --rate-limit execution_count): a batch starts only once the
    instance's resources are `allocated`."""

    allocated: bool

    def stage(self, start: Callable[[], None]) -> None:
        """Run `start` once the resources are allocated (maybe now)."""

    def unstage(self) -> None:
        """The staged start will not be needed (the stub died, the model unloads)."""

    def release(self) -> None:
        """The execution ended: free the resources (if held)."""


@dataclass(frozen=True, slots=True)
class InstanceServices:
    """What every instance of a server shares: the regions it maps (the stubs' pools,
    clients' windows), the parent's blocks (a response may name one: a lent input), the
    calls its stubs make (BLS: stub_calls/), shm given back (memory/shm_upkeep.py; None:
    no upkeep), the count of instances running a batch (latency/hop.py) and how stubs
    are started (stub_launch.py)."""

    regions: RegionMap
    calls: StubCalls
    running: RunningInstances
    refs: BlockRefs | None = None
    upkeep: ShmUpkeep | None = None
    launcher: StubLauncher | None = None  # how stubs start (None: the plain way)


class ModelInstance:
    """Runs batches on one stub; tells its scheduler when it can take the next, `events`
    when the stub goes down and comes back, `accounting` how batches and responses went."""

    def __init__(self, spec: InstanceSpec, services: InstanceServices,
                 events: InstanceEvents[ModelInstance], accounting: ModelAccounting,
                 model_log: logging.Logger) -> None:
        self.spec = spec
        self.model_name = spec.model_name
        self.model_version = spec.model_version
        self.name = spec.name
        self.decoupled = False  # the completed config's (`configure`)
        self.busy = False
        # --rate-limit execution_count: this instance's resources (ExecutionLimit), and
        # the batch waiting for them (staged)
        self.limit: ExecutionLimit | None = None
        self._staged: list[PendingRequest] | None = None
        self._self_calls = 0  # BLS calls in flight from this instance to its own model
        self._calls = services.calls
        self._regions = services.regions
        self._upkeep = services.upkeep  # shm given back (memory/shm_upkeep.py)
        self._running = services.running
        self._events = events
        self._accounting = accounting
        # the model's scheduler, from `configure` on (no batch runs before)
        self._scheduler: SchedulerEvents[ModelInstance] = _UNCONFIGURED
        self._model_log = model_log
        self._supervisor = StubSupervisor(
            spec, self, services.regions,
            services.upkeep.sizes if services.upkeep else ShmSizes(), services.launcher)
        self.readiness = self._supervisor.readiness
        self._inflight: dict[int, PendingRequest] = {}
        self._batches: dict[int, list[PendingRequest]] = {}
        self._next_batch = 0
        self._outputs = StubOutputs(spec.model_name, spec.model_version, services.regions,
                                    services.refs, self._supervisor)
        self._frees = self._outputs.frees  # owed to the stub: they go with the next EXECUTE
        # the hop's average and the latency tricks weighing it (latency/hop.py)
        self.hop = Hop()
        self._handlers = self._message_handlers()
        self._direct_calls: set[int] = set()  # CALL_DIRECTs not answered yet
        self._waiting = False  # counted in `_running.waiting` (`_count_waiting`)

    def configure(self, config_json: str, decoupled: bool,
                  scheduler: SchedulerEvents[ModelInstance]) -> None:
        """Adopt the model's completed config, and the scheduler made from it (after
        auto-complete, before `start`)."""
        self.decoupled = decoupled
        self._scheduler = scheduler
        self._supervisor.configure(config_json, decoupled)

    @property
    def state(self) -> InstanceState:
        return self._supervisor.state

    @property
    def restarts(self) -> int:
        return self._supervisor.restarts

    @property
    def stub(self) -> StubProcess | None:
        """The stub process while one runs."""
        return self._supervisor.stub

    @property
    def pid(self) -> int | None:
        return self._supervisor.pid

    def direct_origin(self) -> tuple[int, str] | None:
        """Caller.direct_origin."""
        stub = self._supervisor.stub
        if stub is None or not stub.has_bell:
            return None
        return stub.origin, stub.bell_name

    @property
    def inflight(self) -> int:
        """Requests sent to the stub that have not had their final response."""
        return len(self._inflight)

    @property
    def can_queue_another(self) -> bool:
        """Whether a second batch may wait in the stub's queue behind the running one
        (the default scheduler asks, without a batcher): the stub then starts it without
        sleeping in between, and the parent's send wakes nobody (sem_post makes no
        syscall without a sleeper). Not for a decoupled model, not while the running
        batch calls its own model, not behind batches that run long: a request bound to
        a slow instance might have gone to another that frees sooner."""
        return (self._supervisor.state is InstanceState.READY and len(self._batches) == 1
                and not self.decoupled and self._self_calls == 0 and self.limit is None
                and self.hop.may_queue_ahead())

    @property
    def waits_on_own_model(self) -> bool:
        """Whether it runs a batch that waits on a BLS call to its own model (a model
        whose every instance does can serve no such call: stub_calls/bls.py). A call
        from the stub's main thread (CALL_DIRECT) says it runs one, also a batch a
        frontend process sent it directly, which the core never saw."""
        return (self.busy or bool(self._direct_calls)) and self._self_calls > 0

    def begin_self_call(self) -> None:
        """A BLS call of this instance's stub to its own model started."""
        self._self_calls += 1

    def end_self_call(self) -> None:
        """A BLS call of this instance's stub to its own model ended."""
        self._self_calls -= 1

    @property
    def staged(self) -> bool:
        """Whether a batch waits for this instance's rate-limiter resources."""
        return self._staged is not None

    @property
    def ready(self) -> bool:
        return (self._supervisor.state is InstanceState.READY and not self.busy
                and self._staged is None)

    async def until_ready(self, poll_s: float = 0.001) -> None:
        """Wait until this instance can take a batch: a decoupled model's final response
        can arrive before the stub says its `execute` returned. ServerError UNAVAILABLE
        if the instance stops being READY meanwhile (its stub died)."""
        while not self.ready:
            if self.state is not InstanceState.READY:
                raise ServerError(ErrorCode.UNAVAILABLE,
                                  f"instance {self.name} is {self.state.value}")
            await asyncio.sleep(poll_s)

    # -- lifecycle (supervisor.py) ------------------------------------------------------
    async def start(self) -> None:
        """Start the stub and run the model's `initialize`; ServerError if it fails."""
        await self._supervisor.start()

    async def launch(self) -> None:
        """Start the stub process and wait for its handshake (no model code runs yet)."""
        await self._supervisor.launch()

    async def auto_complete(self, config_json: str) -> str | None:
        """Run the model's `auto_complete_config` in this (launched) stub; the completed
        config as JSON, or None when the model does not define it."""
        return await self._supervisor.auto_complete(config_json)

    async def stop(self) -> None:
        """Run `finalize`, end the process (killed if it does not end), remove its shm."""
        await self._supervisor.stop()

    def retire(self) -> None:
        """The model is being unloaded (or the server stops): what runs goes on, but a
        stub that dies from now on is not replaced, and a restart under way gives up."""
        self._supervisor.retire()

    def end_requests(self, error: ServerError) -> int:
        """Shutdown's time is up: every request sent to the stub gets `error` now (the
        stub may still be running them; `stop` then gives it little time). How many."""
        count = len(self._inflight)
        self._supervisor.abandoned = self.busy or bool(self._inflight)
        self._fail_inflight(error.message, error.code)
        return count

    # -- the supervisor's host (supervisor.StubHost) -------------------------------------
    def stub_started(self) -> None:
        self.hop.stub = self._supervisor.stub  # the latency tricks reach it from now on
        self._end_busy()

    def stub_stopping(self) -> None:
        self._outputs.flush()

    def stub_lost(self, message: str, code: ErrorCode, requeue: bool) -> None:
        staged, self._staged = self._staged, None
        if staged is not None and self.limit is not None:  # it never started
            self.limit.unstage()
            if requeue:
                self._scheduler.requeue(staged)
            else:
                for pending in staged:
                    pending.deliver(self._outputs.error_response(
                        pending, ServerError(code, message)))
                self._accounting.batch_done(staged)
        if requeue:
            self._requeue_waiting()
        self._fail_inflight(message, code)

    def stub_gone(self) -> None:
        self.hop.stub = None
        self._calls.caller_gone(self)
        self._direct_calls.clear()
        self._count_waiting()
        self._frees.clear()

    def stub_down(self, cause: str, restart_failed: bool) -> None:
        self._events.instance_down(self, cause, restart_failed)

    def stub_back(self) -> None:
        self._events.instance_up(self)
        self._scheduler.on_idle(self)

    def _requeue_waiting(self) -> None:
        """Batches after the first one were waiting in the dead stub's queue, never
        started: back to the scheduler (a crash costs only the request that ran)."""
        if len(self._batches) < 2:
            return
        waiting = list(self._batches)[1:]
        for batch_id in reversed(waiting):  # each goes to the front: the oldest last
            batch = self._batches.pop(batch_id)
            for pending in batch:
                self._inflight.pop(pending.key, None)
                pending.instance = None
                pending.exec_start_ns = 0
            self._scheduler.requeue(batch)

    def _fail_inflight(self, message: str, code: ErrorCode) -> None:
        batches, self._batches = self._batches, {}
        inflight, self._inflight = self._inflight, {}
        for pending in inflight.values():
            pending.deliver(self._outputs.error_response(pending, ServerError(code, message)))
        for batch in batches.values():
            self._accounting.batch_done(batch)
        self._end_busy()

    # -- executing --------------------------------------------------------------------
    def execute(self, batch: list[PendingRequest]) -> None:
        """Send a batch to the stub; the instance is busy until the stub says it is done.
        Under the rate limiter the batch waits (staged) until its resources are free."""
        if self.limit is not None and not self.limit.allocated:
            assert self.ready
            self._staged = batch
            self.limit.stage(self._start_staged)
            return
        self._send(batch)

    def _start_staged(self) -> None:
        """The rate limiter allocated this instance's resources: its staged batch goes."""
        batch, self._staged = self._staged, None
        if batch is None or self._supervisor.stub is None:
            assert self.limit is not None
            self.limit.release()
            if batch:
                self._scheduler.requeue(batch)
            return
        self._send(batch)

    def _send(self, batch: list[PendingRequest]) -> None:
        stub = self._supervisor.stub
        assert stub is not None and (self.ready or self.can_queue_another)
        now = time.monotonic_ns()
        batch_id = self._next_batch = self._next_batch + 1
        frees = tuple(self._frees)
        for pending in batch:  # a frontend's key: answered to it, if it reads this stub
            if pending.key > LAST_PARENT_KEY \
                    and origin_of_key(pending.key) not in stub.answers_read_by:
                pending.rekey()
        # Sent first: the bookkeeping below runs while the stub works (its answer is
        # read on this loop, so after it).
        stub.send(p.execute(batch_id, tuple([pr.inputs for pr in batch]), frees))
        self._frees.clear()
        if not self.busy:  # else it waits in the stub's queue; it starts when that ends
            self._running.count += 1
            self.hop.sent(now)
            self.busy = True
        self._batches[batch_id] = batch
        inflight = self._inflight
        for pending in batch:
            inflight[pending.key] = pending
            pending.instance = self
            pending.exec_start_ns = now

    def watch_for_reply(self) -> None:
        """Just after `execute` of a request that found this instance idle: look for the
        stub's answer on each turn of the event loop (Hop.watch, latency/hop.py), unless
        the model is decoupled or the batch waits for the rate limiter. (That a request
        is coming, the scheduler tells the instance's hop itself: Hop.announce.)"""
        if not self.decoupled and self._staged is None:
            self.hop.watch(self._running.computing)

    def reply(self, call_id: int, error: str | None, value: object) -> None:
        """Answer a CALL of this stub: on its control queue, or on its main queue for a
        CALL_DIRECT (the stub's main thread waits there itself)."""
        if call_id in self._direct_calls:
            self._direct_calls.discard(call_id)
            self._count_waiting()
            self._supervisor.send_main(p.reply(call_id, error, value))
            # Its stub goes on with `execute`: its next call or its answer comes soon
            # when the calls are short, and a loop asleep in epoll would be woken for it.
            stub = self._supervisor.stub
            if stub is not None and self._running.computing == 1:
                stub.watch_up(REPLY_WATCH_NS)
        else:
            self._supervisor.send_control(p.reply(call_id, error, value))

    def reply_item(self, call_id: int, value: object, final: bool) -> None:
        """One answer of a streamed CALL of this stub."""
        self._supervisor.send_control(p.stream_item(call_id, value, final))

    def forget_region(self, token: str) -> None:
        """A client region was unregistered: the stub drops its mapping, if it has one."""
        self._supervisor.send_control(p.forget_region(token))

    def send_control(self, message: tuple) -> None:
        """A message on the stub's control queue, if the stub is alive."""
        self._supervisor.send_control(message)

    def cancel(self, key: int) -> None:
        """Tell the stub: `request.is_cancelled()` becomes true for this request."""
        stub = self._supervisor.stub
        if key in self._inflight and stub is not None and stub.alive():
            stub.send_control(p.cancel(key))
            self._calls.cancel_on_behalf(self, key)

    def frontend_gone(self, slot: int) -> None:
        """Frontend process `slot` died: its stub gets new queues for the next one."""
        stub = self._supervisor.stub
        if stub is not None and stub.alive() and slot < len(stub.frontend_queues):
            stub.renew_frontend_queues(slot)

    def cancel_direct(self, key: int) -> None:
        """`cancel` for a request a frontend process sent the stub itself
        (frontends/direct.py): the parent never had it in flight."""
        stub = self._supervisor.stub
        if stub is not None and stub.alive():
            stub.send_control(p.cancel(key))
            self._calls.cancel_on_behalf(self, key)

    # -- the stub's messages ------------------------------------------------------------
    def on_messages(self, batch: list[tuple]) -> None:
        """The stub's messages (supervisor.StubHost): each kind to its handler; the
        others (READY, INIT_DONE, ...) answer a lifecycle step of the supervisor."""
        handlers = self._handlers
        for message in batch:
            handler = handlers.get(message[0])
            if handler is None:
                self._supervisor.answered(message)
                continue
            try:
                handler(message)
            except Exception as exc:  # noqa: BLE001 - one bad message must not hang requests
                self._unhandled(message, exc)

    def _unhandled(self, message: tuple, exc: Exception) -> None:
        """A message of the stub's the parent could not take in: logged, and the requests
        it answers that are still waiting fail with INTERNAL, so that neither they nor
        the instance's next batch wait forever."""
        log.exception("instance '%s': a message from its stub (kind %s) could not be "
                      "handled", self.name, message[0])
        error = f"a message of model instance '{self.name}' could not be handled: {exc}"
        if message[0] == p.RESPONSES or message[0] == p.DROPPED:
            _, batch_id, _, responses, rescheduled = message
            for key, _ in responses:
                self._fail_request(key, error)
            if batch_id in self._batches:
                self._on_batch_end(batch_id, error, rescheduled)
        elif message[0] == p.SEND:
            self._fail_request(message[p.SEND_KEY], error)

    def _fail_request(self, key: int, error: str) -> None:
        pending = self._inflight.pop(key, None)
        if pending is not None:
            pending.deliver(self._outputs.error_response(pending, internal(error)))

    def _message_handlers(self) -> dict[int, Callable[[tuple], None]]:
        return {p.RESPONSES: self._on_responses, p.DROPPED: self._on_dropped,
                p.SEND: self._on_send,
                p.BATCH_DONE: self._on_batch_done, p.LOG: self._on_log,
                p.CALL: self._on_call, p.CALL_DIRECT: self._on_call_direct,
                p.BLS_RELEASE: self._on_bls_release,
                p.CALL_CANCEL: self._on_call_cancel, p.NOTIFY: self._on_notify,
                p.REGIONS_GONE: self._on_regions_gone, p.SHM_PRESSURE: self._on_shm_pressure,
                p.READINESS: self._on_readiness, p.BATCHES: self._on_batches}

    def _on_call(self, message: tuple) -> None:
        _, call_id, op, args = message
        self._calls.handle(self, call_id, op, args)

    def _on_call_direct(self, message: tuple) -> None:
        _, call_id, op, args = message
        self._direct_calls.add(call_id)
        self._count_waiting()
        self._calls.handle(self, call_id, op, args)

    def _on_bls_release(self, message: tuple) -> None:
        _, token = message
        self._calls.release(token)

    def _on_call_cancel(self, message: tuple) -> None:
        _, call_id = message
        self._calls.cancel(self, call_id)

    def _on_notify(self, message: tuple) -> None:
        _, op, args = message
        self._calls.notify(self, op, args)

    def _on_regions_gone(self, message: tuple) -> None:
        _, names = message
        if self._upkeep is not None:
            self._upkeep.regions_gone(self, names)
        else:
            self._regions.drop(names)

    def _on_shm_pressure(self, message: tuple) -> None:
        if self._upkeep is not None:
            self._upkeep.relieve()

    def _on_readiness(self, message: tuple) -> None:
        _, error, ready = message
        self.readiness.answered(error, ready)

    def _on_batches(self, message: tuple) -> None:
        """What the stub's own batches added to the statistics (stub/batcher.py)."""
        _, sizes, requests = message
        self._accounting.stub_batches(sizes, requests)

    def _on_dropped(self, message: tuple) -> None:
        """The stub answered a batch without running it (all cancelled while it waited):
        as RESPONSES, but the model's statistics count no execution."""
        self._on_responses(message, executed=False)

    def _on_responses(self, message: tuple, executed: bool = True) -> None:
        _, batch_id, error, responses, rescheduled = message
        for key, msg in responses:
            pending = self._inflight.get(key)
            if pending is not None and msg is not None:
                del self._inflight[key]
                started = time.monotonic_ns()
                response = self._read_response(pending, msg, True)
                # a frontend's key: its frontend has the response (stub.py ANSWERS)
                response.answered = executed and key > LAST_PARENT_KEY
                pending.output_ns += time.monotonic_ns() - started
                pending.model_errors += response.error is not None
                pending.deliver(response)
        self._on_batch_end(batch_id, error, rescheduled, executed)

    def _on_send(self, message: tuple) -> None:
        _, key, msg, flags = message
        final = bool(flags & FINAL)
        pending = self._inflight.pop(key, None) if final else self._inflight.get(key)
        if pending is None:
            if msg is not None:
                self._outputs.release(msg[p.RESP_OUTPUTS], self._supervisor.stub)
            return
        started = time.monotonic_ns()
        if msg is None:
            response = InferResponse(self.model_name, self.model_version,
                                     pending.request.id, final=final)
        else:
            response = self._read_response(pending, msg, final)
            if response.final and not final:  # unreadable: the request ends here
                self._inflight.pop(key, None)
            pending.model_errors += response.error is not None
        pending.output_ns += time.monotonic_ns() - started
        pending.deliver(response)
        if self.decoupled:
            self._accounting.responded(pending, response.error is not None,
                                       not response.outputs, started)

    def _read_response(self, pending: PendingRequest, msg: tuple, final: bool
                       ) -> InferResponse:
        """The InferResponse of a ResponseMsg. One the parent cannot read (a descriptor
        naming no region, say: a broken stub) is logged and becomes a final INTERNAL
        error for its request; nothing else is harmed."""
        try:
            return self._outputs.response(pending, msg, final)
        except Exception as exc:  # noqa: BLE001 - the stub's fault, not the server's
            log.exception("instance '%s': a response of its stub could not be read",
                          self.name)
            return self._outputs.error_response(pending, internal(
                f"the response of model instance '{self.name}' could not be read: {exc}"))

    def _on_batch_done(self, message: tuple) -> None:
        _, batch_id, error, rescheduled = message
        self._on_batch_end(batch_id, error, rescheduled)

    def _on_batch_end(self, batch_id: int, error: str | None, rescheduled: tuple,
                      executed: bool = True) -> None:
        batch = self._batches.pop(batch_id, [])
        if error is not None:
            for pending in batch:
                if self._inflight.pop(pending.key, None) is not None:
                    pending.deliver(self._outputs.error_response(pending, internal(error)))
        for key in rescheduled:
            self._reschedule(key)
        if executed:
            self._accounting.batch_done(batch)
        if self._batches:
            self._start_next()
        else:
            self._end_busy()
        if self._supervisor.state is InstanceState.READY:
            self._scheduler.on_idle(self)

    def _end_busy(self) -> None:
        if self.limit is not None:
            self.limit.release()  # (if it held them) what waited for them may start
        if self.busy:
            self._running.count -= 1
            self.busy = False
            self._count_waiting()
            self.hop.answered(time.monotonic_ns())

    def _count_waiting(self) -> None:
        """Keep `_running.waiting` counting this instance while it runs a batch whose
        main thread waits for a CALL_DIRECT's answer."""
        waiting = self.busy and bool(self._direct_calls)
        if waiting != self._waiting:
            self._waiting = waiting
            self._running.waiting += 1 if waiting else -1

    def _start_next(self) -> None:
        """The stub goes on with the batch that waited in its queue: its compute time
        starts now."""
        now = time.monotonic_ns()
        self.hop.answered(now)
        self.hop.sent(now)
        for pending in next(iter(self._batches.values())):
            pending.exec_start_ns = now

    def _reschedule(self, key: int) -> None:
        """RESCHEDULE: the request goes back to the scheduler instead of completing."""
        pending = self._inflight.pop(key, None)
        if pending is None:
            return
        pending.instance = None
        self._scheduler.reschedule(pending)

    def sequence_terminated(self, correlation_id: int | str, reason: str) -> None:
        """pbserve's eviction notice: a sequence this instance held ended without END.
        On the main queue, so the model sees it after what it was running."""
        stub = self._supervisor.stub
        if self.state is InstanceState.READY and stub is not None and stub.alive():
            stub.send(p.sequence_terminated(correlation_id, reason))

    def _on_log(self, message: tuple) -> None:
        _, level, text, filename, line = message
        # Triton's form: `model.py:161] "message"` (the file's name, the message escaped)
        where = f"{os.path.basename(filename)}:{line}" if line else filename
        self._model_log.log(_LOG_LEVELS.get(level, logging.INFO), "%s] %s", where,
                            escaped(text))


class _Unconfigured:
    """An instance's scheduler until `configure` gives it the model's: nothing is queued
    yet, and no batch has run that could end or go back."""

    def on_idle(self, instance: ModelInstance) -> None:
        pass

    def reschedule(self, pending: PendingRequest) -> None:
        raise AssertionError("a batch ran before the instance was configured")

    def requeue(self, batch: list[PendingRequest]) -> None:
        raise AssertionError("a batch ran before the instance was configured")


_UNCONFIGURED = _Unconfigured()
