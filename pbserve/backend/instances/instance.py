"""A model instance: its stub process, the requests it runs, restart after a crash."""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import time
from typing import Callable

from pbserve.backend.instances.block_refs import BlockRefs
from pbserve.backend.observability.log_escape import escaped
from pbserve.backend.observability.log_settings import SERVER_LOG, LogSettings
from pbserve.backend.polling.spare_cpu import MACHINE
from pbserve.backend.scheduling.pending import PendingRequest
from pbserve.backend.instances.stub_calls import StubCalls
from pbserve.backend.instances.stub_process import StubProcess
from pbserve.backend.types import InferResponse, ShmRef, TensorData
from pbserve.backend.instances.user_readiness import UserReadiness
from pbserve.errors import ErrorCode, ServerError, internal
from shm.client_region import is_client_token
from pbserve.backend.instances.shm_upkeep import ShmUpkeep
from shm.pool import RegionMap, ShmSizes
from stub import protocol as p

log = logging.getLogger("pbserve.backend")

START_TIMEOUT_S = 60.0  # interpreter start-up to the stub's handshake
FINALIZE_TIMEOUT_S = 30.0  # `finalize` of the model, then the process is killed
# A stub still in `execute` when shutdown ended its requests (--exit-timeout-secs passed):
# so long more for `execute` to return and `finalize` to run, then it is killed.
ABANDONED_FINALIZE_S = 2.0
RELEASE_DELAY_S = 0.005
RESTART_PAUSE_S = 0.5  # after a failed restart; doubles up to the max
RESTART_PAUSE_MAX_S = 30.0
# The parent watches this long at most, on each turn of its event loop, for the reply of
# a request it sent to an idle instance (ModelInstance.watch_for_reply); longer hops are
# left to the doorbell.
REPLY_WATCH_NS = 300_000
# An idle stub is told at most this often that a request is coming (expect_request):
# about as long as it polls for one (stub/stub.py EXPECT_NS).
EXPECT_EVERY_NS = 200_000
_HOP_WEIGHT = 8  # the hop estimate follows 1/8 of each new figure
# A second batch waits in the stub's queue only behind batches shorter than this
# (ModelInstance.can_queue_another).
QUEUE_AHEAD_MAX_HOP_NS = 1_000_000
FINAL = 1
_LOG_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}
RESCHEDULE_UNSUPPORTED = ("Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, "
                          "while the model is not configured to handle such a flag.")


class InstanceState(enum.Enum):
    STARTING = "STARTING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"


class RunningInstances:
    """How many instances of one server are running a batch (touched only on its event
    loop). The parent watches for a reply only while this is one: its idle turns then
    take no CPU that another instance's stub needs."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class ModelInstance:
    """Runs batches on one stub. `on_idle(self)` is called whenever it can take the next."""

    def __init__(self, *, model_name: str, model_version: str, name: str, model_path: str,
                 init_args: dict[str, str], decoupled: bool, regions: RegionMap,
                 on_idle: Callable[["ModelInstance"], None],
                 on_batch_done: Callable[[list[PendingRequest]], None],
                 model_log: logging.Logger, calls: "StubCalls",
                 python: str | None = None, refs: BlockRefs | None = None,
                 backend_path: str = "",
                 running: RunningInstances | None = None,
                 on_down: Callable[["ModelInstance", str, bool], None] | None = None,
                 on_up: Callable[["ModelInstance"], None] | None = None,
                 upkeep: ShmUpkeep | None = None) -> None:
        """`on_down(self, cause, restart_failed)`: the stub died, or starting a new one
        failed; `on_up(self)`: a restarted stub is ready."""
        self.model_name = model_name
        self.model_version = model_version
        self.name = name
        self.model_path = model_path
        self.backend_path = backend_path  # a Python-based backend's model.py, or ""
        self.init_args = init_args
        self.decoupled = decoupled
        self.state = InstanceState.STOPPED
        self.readiness = UserReadiness(name, self._send_control)
        self.busy = False
        self.restarts = 0
        self.self_calls = 0  # BLS calls in flight from this instance to its own model
        self._calls = calls
        self._refs = refs  # the parent's blocks: an output may name one (lent input)
        self._python = python  # the stub's interpreter (EXECUTION_ENV_PATH), None: ours
        self._regions = regions
        self._upkeep = upkeep  # shm given back (shm_upkeep.py)
        self._on_idle = on_idle
        self._on_reschedule: Callable[[PendingRequest], None] | None = None
        self._on_requeue: Callable[[list[PendingRequest]], None] | None = None
        self._on_batch_done = on_batch_done
        self._on_down = on_down or (lambda instance, cause, restart_failed: None)
        self._on_up = on_up or (lambda instance: None)
        self._model_log = model_log
        self._stub: StubProcess | None = None
        self._inflight: dict[int, PendingRequest] = {}
        self._batches: dict[int, list[PendingRequest]] = {}
        self._next_batch = 0
        self._waiter: asyncio.Future | None = None
        self._frees: list[tuple[str, int]] = []
        self._flush_scheduled = False
        self._retired = False  # unloading or shutting down: a dead stub is not replaced
        self._abandoned = False  # its requests were ended while its stub still ran them
        self._loop = asyncio.get_running_loop()
        self._running = running or RunningInstances()
        self._hop_ns = 0  # recent EXECUTE -> answer times (moving average)
        self._announced_ns = -(2**62)  # when the stub was last told a request is coming (never)
        self._batch_sent_ns = 0

    def set_on_idle(self, on_idle: Callable[["ModelInstance"], None],
                    on_reschedule: Callable[[PendingRequest], None] | None = None,
                    on_requeue: Callable[[list[PendingRequest]], None] | None = None
                    ) -> None:
        """`on_reschedule(pending)`: the model released the request with RESCHEDULE;
        it is no longer in flight here (called before `on_idle` for its batch).
        `on_requeue(requests)`: a batch that was waiting in the queue of a stub that died
        never started; it goes back to the front of the scheduler's queue."""
        self._on_idle = on_idle
        self._on_reschedule = on_reschedule
        self._on_requeue = on_requeue

    @property
    def pid(self) -> int | None:
        return self._stub.pid if self._stub else None

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
        return (self.state is InstanceState.READY and len(self._batches) == 1
                and not self.decoupled and self.self_calls == 0
                and self._hop_ns < QUEUE_AHEAD_MAX_HOP_NS)

    @property
    def ready(self) -> bool:
        return self.state is InstanceState.READY and not self.busy

    async def until_ready(self, poll_s: float = 0.001) -> None:
        """Wait until this instance can take a batch: a decoupled model's final response
        can arrive before the stub says its `execute` returned. ServerError UNAVAILABLE
        if the instance stops being READY meanwhile (its stub died)."""
        while not self.ready:
            if self.state is not InstanceState.READY:
                raise ServerError(ErrorCode.UNAVAILABLE,
                                  f"instance {self.name} is {self.state.value}")
            await asyncio.sleep(poll_s)

    # -- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        """Start the stub and run the model's `initialize`; ServerError if it fails."""
        if self._stub is None:
            await self.launch()
        try:
            self._stub.send((p.INIT, self.init_args, self.model_path, self.decoupled,
                            self.backend_path))
            # No time limit: a model may load for long; a stub that dies ends the wait.
            reply = await self._expect(p.INIT_DONE, "initialize", None)
            if reply[1] is not None:
                # Triton's words: the manager prefixes "load failed for model ..."
                raise ServerError(ErrorCode.INVALID_ARG, f"Internal: {reply[1]}")
            self.readiness.defined = bool(reply[2])
        except BaseException:
            await self._discard_stub()
            self.state = InstanceState.STOPPED
            raise
        self.state = InstanceState.READY
        self._end_busy()

    async def launch(self) -> None:
        """Start the stub process and wait for its handshake (no model code runs yet)."""
        self.state = InstanceState.STARTING
        self._stub = StubProcess(self.name, self._loop, self._on_messages, self._on_exit,
                                 python=self._python,
                                 sizes=self._upkeep.sizes if self._upkeep else ShmSizes())
        try:
            await self._expect(p.READY, "start")
        except BaseException:
            await self._discard_stub()
            self.state = InstanceState.STOPPED
            raise
        # before anything imports model.py; later changes come on the control queue
        self._stub.send((p.LOG_SETTINGS, *SERVER_LOG.settings.stub_message_fields()))
        SERVER_LOG.attach(self)

    def apply_log_settings(self, settings: LogSettings) -> None:
        """The server's log settings changed: the stub filters its Logger lines anew.
        On the control queue, so that an `execute` running now (or a model's thread)
        logs by them at once, and on the main queue too when nothing waits there (an
        idle stub), so that the requests sent after this call run with them: the control
        thread may read its queue after the main loop has taken the next request."""
        if self._stub is not None and self._stub.alive():
            message = (p.LOG_SETTINGS, *settings.stub_message_fields())
            self._stub.send_control(message)
            self._stub.offer(message)

    async def auto_complete(self, config_json: str) -> str | None:
        """Run the model's `auto_complete_config` in this (launched) stub; the completed
        config as JSON, or None when the model does not define it."""
        assert self._stub is not None
        self._stub.send((p.AUTO_COMPLETE, self.model_path, config_json, self.backend_path))
        reply = await self._expect(p.AUTO_COMPLETED, "auto-complete its config", None)
        if reply[1] is not None:
            await self._discard_stub()
            self.state = InstanceState.STOPPED
            raise ServerError(ErrorCode.INVALID_ARG,
                              f"failed to load '{self.model_name}': auto_complete_config: "
                              f"{reply[1]}")
        return reply[2]

    async def _expect(self, kind: int, what: str, timeout: float | None = START_TIMEOUT_S
                      ) -> tuple:
        self._waiter = self._loop.create_future()
        try:
            reply = await asyncio.wait_for(self._waiter, timeout)
        except asyncio.TimeoutError:
            raise internal(f"model instance '{self.name}' did not {what} within "
                           f"{timeout:.0f} s") from None
        finally:
            self._waiter = None
        if reply[0] != kind:
            raise internal(f"model instance '{self.name}': unexpected message {reply[0]} "
                           f"while waiting to {what}")
        return reply

    async def stop(self) -> None:
        """Run `finalize`, end the process (killed if it does not end), remove its shm."""
        stub = self._stub
        if stub is None:
            self.state = InstanceState.STOPPED
            return
        self.state = InstanceState.STOPPING
        if stub.alive():
            try:
                self._flush_frees()
                stub.send((p.FINALIZE,))
                await self._expect(p.FINALIZED, "finalize", ABANDONED_FINALIZE_S
                                   if self._abandoned else FINALIZE_TIMEOUT_S)
            except ServerError as err:
                log.warning("%s", err.message)
            if not await stub.wait_exit(5.0):
                stub.kill()
                await stub.wait_exit(5.0)
        self._fail_inflight(f"model instance '{self.name}' of model '{self.model_name}' "
                            f"was unloaded", ErrorCode.UNAVAILABLE)
        await self._discard_stub()
        self.state = InstanceState.STOPPED

    def end_requests(self, error: ServerError) -> int:
        """Shutdown's time is up: every request sent to the stub gets `error` now (the
        stub may still be running them; `stop` then gives it little time). How many."""
        count = len(self._inflight)
        self._abandoned = self.busy or bool(self._inflight)
        self._fail_inflight(error.message, error.code)
        return count

    def retire(self) -> None:
        """The model is being unloaded (or the server stops): what runs goes on, but a
        stub that dies from now on is not replaced, and a restart under way gives up."""
        self._retired = True

    async def _discard_stub(self) -> None:
        stub, self._stub = self._stub, None
        self.readiness.stub_gone()
        if stub is not None:
            self._calls.caller_gone(self)
            stub.kill()
            await stub.wait_exit(5.0)
            stub.close()
            self._regions.forget(stub.prefix)
            self._frees.clear()

    def _on_exit(self, code: int) -> None:
        """The stub died on its own: fail what it held, then start a new one."""
        status = f"signal {-code}" if code < 0 else f"status {code}"
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(internal(
                f"Stub process '{self.name}' is not healthy. It exited with {status}."))
        if self.state is not InstanceState.READY:
            return  # starting or stopping: the waiting coroutine deals with it
        message = (f"Stub process '{self.name}' is not healthy: it exited with {status} "
                   f"while model '{self.model_name}' was running")
        if not self._retired:  # else no stub comes back to run them
            self._requeue_waiting()
        self._fail_inflight(message, ErrorCode.INTERNAL)
        if self._retired:
            log.error("%s; not restarted: the model is being unloaded or the server stops",
                      message)
            self.state = InstanceState.STOPPING  # `stop` finds the stub gone
            return
        log.error("%s; restarting it", message)
        self.state = InstanceState.RESTARTING
        self._on_down(self, message, False)
        self._loop.create_task(self._restart())

    async def _restart(self) -> None:
        """Start a new stub; if that fails, whatever the cause (initialize raised, the
        interpreter is gone, no file descriptors left), try again with a growing pause,
        until it works or the model is unloaded. Queued requests wait (bounded by the
        model's outage.py)."""
        pause = RESTART_PAUSE_S
        while True:
            if self._retired:
                return  # shutting down: `stop` ends what is left
            await self._discard_stub()
            self.restarts += 1
            try:
                await self.start()
                break
            except Exception as err:  # noqa: BLE001 - every failure is tried again
                cause = err.message if isinstance(err, ServerError) else \
                    f"{type(err).__name__}: {err}"
                if self._retired:
                    return
                log.error("restart of '%s' failed: %s; trying again in %.1f s", self.name,
                          cause, pause)
                self.state = InstanceState.RESTARTING
                self._on_down(self, cause, True)
            await asyncio.sleep(pause)
            if self.state is not InstanceState.RESTARTING:
                return  # unloaded meanwhile
            pause = min(pause * 2, RESTART_PAUSE_MAX_S)
        log.info("model instance '%s' of model '%s' is running again", self.name,
                 self.model_name)
        self._on_up(self)
        self._on_idle(self)

    def _requeue_waiting(self) -> None:
        """Batches after the first one were waiting in the dead stub's queue, never
        started: back to the scheduler (a crash costs only the request that ran)."""
        if self._on_requeue is None or len(self._batches) < 2:
            return
        waiting = list(self._batches)[1:]
        for batch_id in reversed(waiting):  # each goes to the front: the oldest last
            batch = self._batches.pop(batch_id)
            for pending in batch:
                self._inflight.pop(pending.key, None)
                pending.instance = None
                pending.exec_start_ns = 0
            self._on_requeue(batch)

    def _fail_inflight(self, message: str, code: ErrorCode) -> None:
        batches, self._batches = self._batches, {}
        inflight, self._inflight = self._inflight, {}
        for pending in inflight.values():
            pending.deliver(self._error_response(pending, ServerError(code, message)))
        for batch in batches.values():
            self._on_batch_done(batch)
        self._end_busy()

    # -- executing --------------------------------------------------------------------
    def execute(self, batch: list[PendingRequest]) -> None:
        """Send a batch to the stub; the instance is busy until the stub says it is done."""
        assert self._stub is not None and (self.ready or self.can_queue_another)
        now = time.monotonic_ns()
        batch_id = self._next_batch = self._next_batch + 1
        frees = tuple(self._frees)
        # Sent first: the bookkeeping below runs while the stub works (its answer is
        # read on this loop, so after it).
        self._stub.send((p.EXECUTE, batch_id, tuple([pr.inputs for pr in batch]), frees))
        self._frees.clear()
        if not self.busy:  # else it waits in the stub's queue; it starts when that ends
            self._running.count += 1
            self._batch_sent_ns = now
            self.busy = True
        self._batches[batch_id] = batch
        inflight = self._inflight
        for pending in batch:
            inflight[pending.key] = pending
            pending.instance = self
            pending.exec_start_ns = now

    def expect_request(self) -> None:
        """A request is coming and this idle instance will take it: wake its stub now,
        so that the stub's wake-up (tens of us from an idle CPU) overlaps the decoding
        and validation still ahead of `execute` instead of adding to the hop. Only while
        the machine has CPU to spare (polling/spare_cpu.py): the stub polls until it comes."""
        if not self.ready or self._stub is None:
            return
        now = time.monotonic_ns()
        if now - self._announced_ns > EXPECT_EVERY_NS and MACHINE.spare():
            self._announced_ns = now
            self._stub.announce()

    def watch_for_reply(self) -> None:
        """Just after `execute` of a request that found this instance idle: look for the
        stub's answer on each turn of the event loop (at most REPLY_WATCH_NS), so that an
        idle loop does not sleep in epoll and get woken by the doorbell, a wake-up of an
        idle CPU on the round trip (StubProcess.watch_up). Only when no other instance is
        running and this instance's recent hops fit in the budget."""
        if self._running.count == 1 and not self.decoupled \
                and self._hop_ns < REPLY_WATCH_NS and self._stub is not None:
            self._stub.watch_up(REPLY_WATCH_NS)

    def reply(self, call_id: int, error: str | None, value: object) -> None:
        """Answer a CALL of this stub (on its control queue)."""
        if self._stub is not None and self._stub.alive():
            self._stub.send_control((p.REPLY, call_id, error, value))

    def reply_item(self, call_id: int, value: object, final: bool) -> None:
        """One answer of a streamed CALL of this stub."""
        if self._stub is not None and self._stub.alive():
            self._stub.send_control((p.STREAM_ITEM, call_id, value, final))

    def forget_region(self, token: str) -> None:
        """A client region was unregistered: the stub drops its mapping, if it has one."""
        self._send_control((p.FORGET_REGION, token))

    def send_control(self, message: tuple) -> None:
        """A message on the stub's control queue, if the stub is alive."""
        self._send_control(message)

    def _send_control(self, message: tuple) -> None:
        if self._stub is not None and self._stub.alive():
            self._stub.send_control(message)

    def cancel(self, key: int) -> None:
        """Tell the stub: `request.is_cancelled()` becomes true for this request."""
        if key in self._inflight and self._stub is not None and self._stub.alive():
            self._stub.send_control((p.CANCEL, key))
            self._calls.cancel_on_behalf(self, key)

    def _on_messages(self, batch: list[tuple]) -> None:
        for message in batch:
            kind = message[0]
            if kind == p.RESPONSES:
                self._on_responses(message[1], message[2], message[3], message[4])
            elif kind == p.SEND:
                self._on_send(message[1], message[2], message[3])
            elif kind == p.BATCH_DONE:
                self._on_batch_end(message[1], message[2], message[3])
            elif kind == p.LOG:
                self._on_log(message[1], message[2], message[3], message[4])
            elif kind == p.CALL:
                self._calls.handle(self, message[1], message[2], message[3])
            elif kind == p.BLS_RELEASE:
                self._calls.release(message[1])
            elif kind == p.CALL_CANCEL:
                self._calls.cancel(self, message[1])
            elif kind == p.NOTIFY:
                self._calls.notify(self, message[1], message[2])
            elif kind == p.REGIONS_GONE:
                if self._upkeep is not None:
                    self._upkeep.regions_gone(self, message[1])
                else:
                    self._regions.drop(message[1])
            elif kind == p.SHM_PRESSURE:
                if self._upkeep is not None:
                    self._upkeep.relieve()
            elif kind == p.READINESS:
                self.readiness.answered(message[1], message[2])
            elif self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(message)

    def _on_responses(self, batch_id: int, error: str | None, responses: tuple,
                      rescheduled: tuple) -> None:
        for key, msg in responses:
            pending = self._inflight.get(key)
            if pending is not None and msg is not None:
                del self._inflight[key]
                pending.deliver(self._response(pending, msg, True))
        self._on_batch_end(batch_id, error, rescheduled)

    def _on_send(self, key: int, msg: tuple | None, flags: int) -> None:
        final = bool(flags & FINAL)
        pending = self._inflight.pop(key, None) if final else self._inflight.get(key)
        if pending is None:
            if msg is not None:
                self._release_outputs(msg[1], self._stub)
            return
        if msg is None:
            pending.deliver(InferResponse(self.model_name, self.model_version,
                                          pending.request.id, final=final))
        else:
            pending.deliver(self._response(pending, msg, final))

    def _on_batch_end(self, batch_id: int, error: str | None, rescheduled: tuple) -> None:
        batch = self._batches.pop(batch_id, [])
        if error is not None:
            for pending in batch:
                if self._inflight.pop(pending.key, None) is not None:
                    pending.deliver(self._error_response(pending, internal(error)))
        for key in rescheduled:
            self._reschedule(key)
        self._on_batch_done(batch)
        if self._batches:
            self._start_next()
        else:
            self._end_busy()
        if self.state is InstanceState.READY:
            self._on_idle(self)

    def _end_busy(self) -> None:
        if self.busy:
            self._running.count -= 1
            self.busy = False
            self._time_hop(time.monotonic_ns())

    def _start_next(self) -> None:
        """The stub goes on with the batch that waited in its queue: its compute time
        starts now."""
        now = time.monotonic_ns()
        self._time_hop(now)
        self._batch_sent_ns = now
        for pending in next(iter(self._batches.values())):
            pending.exec_start_ns = now

    def _time_hop(self, now: int) -> None:
        self._hop_ns += (now - self._batch_sent_ns - self._hop_ns) // _HOP_WEIGHT

    def _reschedule(self, key: int) -> None:
        """RESCHEDULE: the request goes back to the scheduler instead of completing."""
        pending = self._inflight.pop(key, None)
        if pending is None:
            return
        pending.instance = None
        if self._on_reschedule is not None:
            self._on_reschedule(pending)
        else:
            pending.deliver(self._error_response(
                pending, ServerError(ErrorCode.INVALID_ARG, RESCHEDULE_UNSUPPORTED)))

    def sequence_terminated(self, correlation_id: int | str, reason: str) -> None:
        """pbserve's eviction notice: a sequence this instance held ended without END.
        On the main queue, so the model sees it after what it was running."""
        if self.state is InstanceState.READY and self._stub is not None \
                and self._stub.alive():
            self._stub.send((p.SEQUENCE_TERMINATED, correlation_id, reason))

    def _on_log(self, level: int, message: str, filename: str, line: int) -> None:
        # Triton's form: `model.py:161] "message"` (the file's name, the message escaped)
        where = f"{os.path.basename(filename)}:{line}" if line else filename
        self._model_log.log(_LOG_LEVELS.get(level, logging.INFO), "%s] %s", where,
                            escaped(message))

    # -- responses --------------------------------------------------------------------
    def _response(self, pending: PendingRequest, msg: tuple, final: bool) -> InferResponse:
        error, outputs, params = msg
        response = InferResponse(self.model_name, self.model_version, pending.request.id,
                                 final=final)
        if error is not None:
            self._release_outputs(outputs, self._stub)
            response.error = ServerError(ErrorCode(error[0]), error[1])
            return response
        view = self._regions.view
        response.outputs = [TensorData(name, datatype, shape, view(region, offset, nbytes))
                            for name, datatype, shape, region, offset, nbytes in outputs]
        if params and params != "{}":
            response.parameters = json.loads(params)
        if outputs and pending.request.output_shm:
            outputs = self._in_client_regions(response, outputs)
        if outputs:
            stub = self._stub
            held = [loc for loc in {(d[3], d[4]) for d in outputs}
                    if self._refs is not None and self._refs.hold(loc)]
            if not held:
                response._release = lambda: self._release_outputs(outputs, stub)
            else:  # some outputs are parent blocks (inputs lent back): they stay alive
                refs = self._refs  # until this response is released

                def release() -> None:
                    self._release_outputs(outputs, stub)
                    for location in held:
                        refs.drop(location)
                response._release = release
            response._descs = outputs
        return response

    @staticmethod
    def _in_client_regions(response: InferResponse, outputs: tuple) -> tuple:
        """Mark the outputs the stub wrote into the client's regions (the frontends send
        no data for them); the outputs that are the stub's blocks."""
        for tensor, desc in zip(response.outputs, outputs):
            if is_client_token(desc[3]):
                tensor.shm = ShmRef("", desc[4], desc[5], desc[3])
        return tuple([d for d in outputs if not is_client_token(d[3])])

    def _error_response(self, pending: PendingRequest, error: ServerError) -> InferResponse:
        return InferResponse(self.model_name, self.model_version, pending.request.id,
                             error=error)

    def _release_outputs(self, outputs: tuple, stub: StubProcess | None) -> None:
        """Give output blocks back to the stub that made them, with the next EXECUTE or
        shortly after; blocks of a stub that has since died went with its regions."""
        if stub is None or stub is not self._stub:
            return
        self._frees.extend((desc[3], desc[4]) for desc in outputs)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_later(RELEASE_DELAY_S, self._flush_frees)

    def _flush_frees(self) -> None:
        self._flush_scheduled = False
        if self._frees and self._stub is not None and self._stub.alive():
            frees, self._frees = tuple(self._frees), []
            self._stub.send_control((p.RELEASE, frees))
