"""The stub: one process per model instance, running the user's model.py.

Three queues connect it to the parent (all in shm):
- main (parent -> stub): INIT, EXECUTE, FINALIZE, read by the main thread, which runs
  the model's `initialize`, `execute` and `finalize` (and the answers to the calls that
  thread makes, stub/direct_replies.py).
- control (parent -> stub): RELEASE and CANCEL, read by a control thread so that they
  arrive while `execute` runs.
- up (stub -> parent): everything the stub says.
With frontend processes, each also has a queue to the stub and one back (stub/frontends.py):
the main thread reads the main queue and theirs as one inbox (stub/inbox.py), and answers
a frontend's batch to it. Other stubs may then send it BLS calls the same way, on a
queue pair the core makes for each caller (CALLER_QUEUES), and it sends its own blocking
BLS calls to other stubs so (stub/direct_bls.py).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import threading
import time
import traceback
from collections.abc import Callable

import backend_utils
import posix_ipc
import triton_python_backend_utils
from backend_utils import _runtime
from backend_utils.constants import (
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, TRITONSERVER_RESPONSE_COMPLETE_FINAL)
from backend_utils.error import TritonError
from backend_utils.request import InferenceRequest
from backend_utils.trace import InferenceTrace
from shm.cuda_region import is_cuda_token
from shm.doorbell import ring
from shm.pool import Block, Pool, RegionMap, ShmSizes
from shm.queue import MessageQueue
from stub import protocol as p
from stub.frontends import LAST_PARENT_KEY, Frontends, origin_of, origin_of_key
from stub.inbox import PARENT, Inbox, bell_name
from stub.protocol import REQ_KEY
from stub.async_loop import AsyncLoopThread
from stub.bls import BlsClient
from stub.batcher import BatchCounts, Queued, StubBatcher, batch_answers
from stub.borrowed import BorrowedBlocks
from stub.calls import Calls
from stub.direct_bls import STATS_INTERVAL_S as DIRECT_BLS_FLUSH_S, DirectBls
from stub.direct_replies import DirectReplies, poll
from stub.context import CURRENT_KEYS
from stub.errors import StubError, own_code
from stub.errors import describe as _describe
from stub.log_levels import LogLevels
from stub.memory import StubMemory
from stub.model_loader import import_backend_module, import_model_module, model_class
from stub.responses import ExecuteReturnError, check_returned, response_msg
from stub.runtime import StubRuntime
from stub.gpu_memory import GpuMemory
from stub.tensors import input_tensors

PARENT_CHECK_S = 0.5
EXPECT_NS = 200_000  # how long an announced request is polled for before sleeping again
# After answering an announced request, the next is polled for this long, if the time
# from an answer to the next request has recently been shorter (`_time_gap`).
NEXT_NS = 300_000
REPLY_POLL_NS = 300_000  # ... and a BLS answer, during an announced request (direct_replies)
FRONTEND_READ_S = 5.0  # at unload, how long the frontends may take to read their answers
PRESSURE_PAUSE_S = 0.05  # /dev/shm full: how long the others get to give memory back
SHM_WAIT_S = 10.0  # ... and how long an allocation waits for memory in all
CANCEL_COROUTINES = "pbserve.cancel_coroutines"  # model config parameter, "true" opts in
FORCE_CPU_ONLY_INPUT_TENSORS = "FORCE_CPU_ONLY_INPUT_TENSORS"  # Triton's; "no": GPU inputs

LOG_ERROR = 2
WARM_KEY = -1  # the synthetic request of `_warm_up` (the parent's keys count from 1)
WARM_BYTES = 64  # ... and its input: a small block, as a first request's
WARM_POLL_NS = 20_000  # ... and its poll of the main queue (an announced request's)
RING_LATE_S = 0.1  # how long an idle stub leaves a message put quietly unrung
OWN_BATCH = -1  # `_origin` while a batch of the stub's own batcher runs (stub/batcher.py)


def queue_names(prefix: str) -> tuple[str, str, str]:
    """Names of the main, control and up queues of the stub with this prefix."""
    return prefix + "-m", prefix + "-c", prefix + "-u"


def frontend_queue_names(prefix: str, slot: int, generation: int = 0) -> tuple[str, str]:
    """Names of the queues between frontend process `slot` (its `generation`th process)
    and the stub with this prefix: its requests to the stub, the stub's answers to it."""
    return f"{prefix}-f{slot}g{generation}", f"{prefix}-a{slot}g{generation}"


def caller_queue_names(prefix: str, origin: int) -> tuple[str, str]:
    """Names of the queues between the stub of `origin`, which sends BLS calls directly
    (stub/direct_bls.py), and the stub with this prefix: its calls, the answers."""
    return f"{prefix}-k{origin}", f"{prefix}-l{origin}"


class Stub:
    def __init__(self, prefix: str, parent_pid: int, instance_name: str,
                 doorbell_fd: int = -1, sizes: ShmSizes = ShmSizes(),
                 frontend_bell_fds: tuple[int, ...] = ()) -> None:
        main, control, up = queue_names(prefix)
        self.main_q = MessageQueue.attach(main)
        self.inbox = Inbox(self.main_q, posix_ipc.Semaphore(bell_name(prefix))
                           if frontend_bell_fds else None)
        self._origin = PARENT  # where the message being handled came from
        self.control_q = MessageQueue.attach(control)
        self.up_q = MessageQueue.attach(up)
        self.doorbell_fd = doorbell_fd  # rung after each put (shm/doorbell.py); -1: none
        self.pool = Pool(prefix + "-s", sizes.default, sizes.growth,
                         on_pressure=self._relieve_pressure)
        self.regions = RegionMap()
        self.parent_pid = parent_pid
        self.instance_name = instance_name
        self.model = None
        self.module = None
        self.builtin_backend = False  # served by pbserve's model.py (onnxruntime, pytorch)
        self.runtime: StubRuntime | None = None
        self.decoupled = False
        self.model_name = ""
        self.cancel_coroutines = False
        self.log_levels = LogLevels()
        self.async_loop = AsyncLoopThread(self.log_error)
        self.main_messages = DirectReplies(self.inbox)  # Stub is made on the main thread
        self.calls = Calls(self.send, self.main_messages)
        self.borrowed = BorrowedBlocks()
        self.gpu = GpuMemory(self.pool.prefix, self.regions, dict(sizes.cuda))
        self.gpu_inputs = False  # FORCE_CPU_ONLY_INPUT_TENSORS "no": GPU inputs stay there
        self.memory = StubMemory(self.pool, self.regions, self.borrowed, self.gpu)
        # BLS calls sent to other stubs directly: with frontend processes (the stubs then
        # wait on bells, which other stubs may post)
        self.direct_bls = DirectBls(self.inbox, self.main_messages, self.send,
                                    self.calls.call) if frontend_bell_fds else None
        self.bls = BlsClient(self.memory, self.send, self.calls, self.direct_bls)
        self._open: set[int] = set()
        self._answered_ns = 0  # when the last EXECUTE was answered
        self._gap_ns = NEXT_NS  # answer -> next EXECUTE, recently (moving average)
        self._open_lock = threading.Lock()
        self._running = True
        self._announced = False  # the request now running was announced (expect_request)
        # the frontends' requests this stub batches itself (QUEUED; replaced at INIT)
        self.batcher = StubBatcher.of({})
        self.batch_counts = BatchCounts()
        self._own_batch: list[Queued] = []  # ... the one running
        self._own_started_ns = 0
        self._unrung = False  # a message was put on the up queue without a ring
        self._rung_s = 0.0  # when the parent's doorbell was last rung
        self.initialized = False  # `initialize` returned; BLS is allowed from then on
        self.finalizing = False  # ... until `finalize` starts
        # what each message kind of the main queue and of the control queue runs
        self._main_handlers = {
            p.EXECUTE: self._on_execute_msg, p.QUEUED: self._on_queued_msg,
            p.INIT: self._on_init_msg,
            p.AUTO_COMPLETE: self._on_auto_complete_msg, p.FINALIZE: self._on_finalize_msg,
            p.SEQUENCE_TERMINATED: self._on_sequence_terminated_msg,
            p.LOG_SETTINGS: self._on_log_settings_msg,
            p.RELEASE: self._on_release_msg,  # a frontend's, for the outputs it wrote
            p.FRONTEND_QUEUES: self._on_frontend_queues_msg,
            p.CALLER_QUEUES: self._on_caller_queues_msg, p.CALLER_GONE: self._on_caller_gone_msg,
        }
        self._control_handlers = {
            p.REPLY: self._on_reply_msg, p.STREAM_ITEM: self._on_stream_item_msg,
            p.RELEASE: self._on_release_msg, p.CANCEL: self._on_cancel_msg,
            p.FORGET_REGION: self._on_forget_region_msg, p.IS_READY: self._on_is_ready_msg,
            p.LOG_SETTINGS: self._on_log_settings_msg,
            p.FORGET_REGIONS: self._on_forget_regions_msg, p.TRIM: self._on_trim_msg,
        }
        # frontend processes that send requests directly (pbserve/frontends/direct.py)
        self.frontends = Frontends(frontend_bell_fds, self.inbox, self._free)
        for slot in range(len(frontend_bell_fds)):
            self.frontends.attach(slot, *frontend_queue_names(prefix, slot))

    # -- plumbing ---------------------------------------------------------------------
    def send(self, message: tuple) -> None:
        first = self.up_q.put(p.encode(message))
        # else the parent has yet to read the last, which was rung for (or is `_unrung`)
        if first or self._unrung:
            self._ring()

    def send_quietly(self, message: tuple) -> None:
        """`send` without waking the parent for it: a message it need not read at once
        (BATCHES: it reads the up queue before a statistics call). The next `send`
        rings for it, or this one if the last ring is RING_LATE_S old, or the main loop
        once idle that long. The flag is set before the put: a `send` from another
        thread in between rings for both."""
        self._unrung = True
        self.up_q.put(p.encode(message))
        if time.monotonic() - self._rung_s > RING_LATE_S:
            self._ring()

    def _ring(self) -> None:
        self._unrung = False
        self._rung_s = time.monotonic()
        if self.doorbell_fd >= 0:
            ring(self.doorbell_fd)

    def sending(self) -> bool:
        """Whether a thread is putting a message on the up queue now."""
        lock = getattr(self.up_q, "_put_lock", None)
        return lock is not None and lock.locked()

    def log_error(self, text: str) -> None:
        self.send(p.log(LOG_ERROR, text, "stub", 0))

    def describe(self, exc: BaseException) -> str:
        """Triton's text for `exc`; only its type and message for a built-in backend,
        whose frames are pbserve's and its libraries', never the model's own."""
        return _describe(exc, frames=not self.builtin_backend)

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent_pid

    def bls_allowed(self) -> bool:
        """From the end of `initialize` to the start of `finalize`, as Triton."""
        return self.initialized and not self.finalizing

    def request_closed(self, key: int) -> None:
        if self._open:  # only a decoupled model's requests are tracked (see _request)
            with self._open_lock:
                self._open.discard(key)
        if self.runtime is not None:
            self.runtime.forget(key)
        if self.direct_bls is not None:
            self.direct_bls.forget_request(key)

    # -- main loop --------------------------------------------------------------------
    def run(self) -> None:
        self.send(p.ready(os.getpid(), self.pool.prefix))
        threading.Thread(target=self._control_loop, name="pbserve-stub-control",
                         daemon=True).start()
        handlers = self._main_handlers
        messages = self.main_messages
        try:
            while self._running:
                # With a message waiting, the idle timeout is not asked for (a lock).
                if messages.pending():
                    timeout = None
                elif self.batcher.waiting:  # every message read: run a batch, or wait
                    batch, timeout = self.batcher.next_batch(time.monotonic())
                    if batch:
                        self._run_own_batch(batch)
                        continue
                else:
                    timeout = self._idle_timeout()
                got = messages.next(timeout)
                if got is None:
                    if self.batcher.waiting:
                        continue  # the batch's queue delay is over
                    if self._unrung:  # idle: what was sent quietly is read now
                        self._ring()
                        continue
                    if not self.parent_alive():
                        return
                    self._trim(False)  # idle for PARENT_CHECK_S: give idle regions back
                    if self.direct_bls is not None:
                        self.direct_bls.after_execute()
                    continue
                self._origin, raw = got
                if not raw:  # the parent announces a request (or wakes the loop to end)
                    self._announced = True
                    self._expect_request(EXPECT_NS)
                    continue
                message = p.decode(raw)
                handler = handlers.get(message[0])
                if handler is not None:
                    handler(message)
        finally:
            self.close()

    def _idle_timeout(self) -> float | None:
        """How long an idle stub sleeps before it looks again: DIRECT_BLS_FLUSH_S while
        its direct BLS calls owe the core statistics or a callee outputs
        (DirectBls.after_execute), PARENT_CHECK_S while its pools have a region to give
        back (`_trim`), else until a message comes (its death with the parent is the
        kernel's: stub/parent_death.py)."""
        if self._unrung:
            return RING_LATE_S
        if self.direct_bls is not None and self.direct_bls.owes():
            return DIRECT_BLS_FLUSH_S
        return PARENT_CHECK_S if self.pool.has_spare() or self.gpu.has_spare() else None

    # -- the main queue's messages ------------------------------------------------------
    def _on_execute_msg(self, message: tuple) -> None:
        self._time_gap()
        _, batch_id, requests, frees = message
        if self._origin != PARENT:
            if not self.frontends.knows(self._origin):
                return  # not a frontend this stub was told of
            if self.finalizing:
                self._refuse(batch_id, requests)
                return
        # An announced request: the machine has CPU to spare, BLS answers are polled for
        self.main_messages.poll_ns = REPLY_POLL_NS if self._announced else 0
        self.on_execute(batch_id, requests, frees)
        self._answered_ns = time.perf_counter_ns()
        if self.direct_bls is not None:
            self.direct_bls.after_execute()
        if self._announced:
            # The next comes soon, as the last did: poll for it. One that comes while
            # polling counts as announced, so a chain of close requests (an ensemble's
            # steps on this model, a client's next request) is polled for throughout;
            # the chain begins only with an announcement, which needs spare CPU.
            self._announced = self._gap_ns < NEXT_NS and self._expect_request(NEXT_NS)

    def _on_queued_msg(self, message: tuple) -> None:
        """A frontend's request for this stub's own batcher (stub/batcher.py)."""
        _, key, msg, size, arrived_ns, frees = message
        origin = self._origin
        if not self.frontends.knows(origin):
            return
        if frees:
            self._returned(frees)
            self._free(frees)
        if self.finalizing:
            self._to_frontend(origin, p.answers(((key, self._unloading()),)), ())
            return
        self.batcher.add(origin, key, msg, size, arrived_ns)

    def _run_own_batch(self, batch: list[Queued]) -> None:
        """Run a batch of this stub's own batcher; the requests cancelled while they
        waited are answered without it, as the core's batcher drops them."""
        runtime = self.runtime
        cancelled = [q for q in batch if runtime.all_cancelled([q.key])] \
            if runtime is not None else []
        if cancelled:
            self._as_own_batch(cancelled, lambda: self._drop_cancelled(
                0, tuple([q.msg for q in cancelled])))
            batch = [q for q in batch if q not in cancelled]
        if batch:
            self._as_own_batch(batch, lambda: self.on_execute(
                0, tuple([q.msg for q in batch]), ()))
            if self.direct_bls is not None:
                self.direct_bls.after_execute()

    def _as_own_batch(self, batch: list[Queued], run: Callable[[], None]) -> None:
        """`run` (which answers with `_answer`) for `batch` of this stub's batcher."""
        self._own_batch = batch
        self._own_started_ns = time.monotonic_ns()
        self._origin = OWN_BATCH
        try:
            run()
        finally:
            self._origin = PARENT
            self._own_batch = []

    def _answer_own(self, error: str | None, msgs: tuple, rescheduled: tuple,
                    dropped: bool) -> None:
        """The answer to a batch of this stub's own batcher: what it added to the
        statistics on the up queue first (read before any statistics call, so one made
        once a client has its answer finds it counted), then each frontend its
        requests' answers."""
        answers = batch_answers(self._own_batch, error, msgs, rescheduled, dropped,
                                self._own_started_ns, self.batch_counts)
        self.send_quietly(p.batches(*self.batch_counts.take()))
        for origin, entries in answers.items():
            self._to_frontend(origin, p.answers(tuple(entries)), p.answers_blocks(entries))

    def _on_init_msg(self, message: tuple) -> None:
        _, args, model_path, decoupled, backend_path = message
        self.on_init(args, model_path, decoupled, backend_path)

    def _on_auto_complete_msg(self, message: tuple) -> None:
        _, model_path, config_json, backend_path = message
        self.on_auto_complete(model_path, config_json, backend_path)

    def _on_finalize_msg(self, message: tuple) -> None:
        # What frontends sent before the unload runs first, as Triton's unload waits for
        # the requests in flight; what they send after is refused.
        self._from_frontends()
        while self.batcher.waiting:
            self._run_own_batch(self.batcher.next_batch(math.inf)[0])
        self.on_finalize()
        # Refused now (`finalizing`); the outputs the frontends were sent are read before
        # the stub ends and its regions with it (their RELEASEs say so).
        deadline = time.monotonic() + FRONTEND_READ_S
        self._from_frontends()
        while self.frontends.reading() and time.monotonic() < deadline:
            time.sleep(0.002)
            self._from_frontends()

    def _from_frontends(self) -> None:
        """Handle what waits in the frontends' queues now."""
        handlers = self._main_handlers
        while (got := self.inbox.from_frontends()) is not None:
            self._origin, raw = got
            if raw:
                message = p.decode(raw)
                handler = handlers.get(message[0])
                if handler is not None:
                    handler(message)
        self._origin = PARENT

    def _refuse(self, batch_id: int, requests: tuple) -> None:
        """A frontend's batch that came after FINALIZE: each request `_unloading`."""
        answer = self._unloading()
        self._batch_over(batch_id, None, tuple([(r[REQ_KEY], answer) for r in requests]),
                         (), dropped=True)

    def _unloading(self) -> tuple:
        """The answer (a ResponseMsg) to a frontend's request that came after FINALIZE:
        UNAVAILABLE, not run."""
        error = (int(TritonError.UNAVAILABLE),
                 f"model '{self.model_name}' is unloading: the request was not run")
        return p.response_record(error, (), "{}")

    def _on_sequence_terminated_msg(self, message: tuple) -> None:
        _, correlation_id, reason = message
        self.on_sequence_terminated(correlation_id, reason)

    def _on_log_settings_msg(self, message: tuple) -> None:  # on either queue
        _, generation, verbose_level, info, warning, error = message
        self.log_levels.update(generation, verbose_level, info, warning, error)

    def _time_gap(self) -> None:
        """Follow the time from each answer to the next EXECUTE (a moving average)."""
        if self._answered_ns:
            gap = time.perf_counter_ns() - self._answered_ns
            self._gap_ns += (gap - self._gap_ns) // 8

    def _expect_request(self, budget_ns: int) -> bool:
        """A request is on its way: poll the main queue for it, `budget_ns` at most,
        instead of sleeping in the semaphore; the parent's post of it then wakes no one.
        Used when the parent announced one (its `expect_request`: this process wakes
        while the parent still decodes it), and after answering an announced request
        when the next came soon the last times (NEXT_NS): the parent's announcement of
        it then makes no system call either. The parent announces only while the
        machine has CPU to spare. Yields the CPU on each poll: the parent, which is
        making the request, may need it. Whether a message came."""
        return poll(self.main_messages.pending, budget_ns)

    def _control_loop(self) -> None:
        handlers = self._control_handlers
        while self._running:
            raw = self.control_q.get()  # a daemon thread: it needs no wake-up to end
            if not raw:
                continue
            message = p.decode(raw)
            handler = handlers.get(message[0])
            if handler is not None:
                handler(message)

    # -- the control queue's messages ---------------------------------------------------
    def _on_reply_msg(self, message: tuple) -> None:
        _, call_id, error, value = message
        self.calls.on_reply(call_id, error, value)

    def _on_stream_item_msg(self, message: tuple) -> None:
        _, call_id, value, final = message
        self.calls.on_item(call_id, value, final)

    def _on_release_msg(self, message: tuple) -> None:  # on either thread
        _, frees = message
        if self.main_messages.on_main_thread():
            self._returned(frees)
        self._free(frees)

    def _returned(self, frees: tuple) -> None:
        """On the main thread: the frontend the message came from reads these no more."""
        if frees and self._origin != PARENT:
            self.frontends.returned(self._origin, frees)

    def _on_cancel_msg(self, message: tuple) -> None:
        if self.runtime is not None:
            _, key = message
            self.runtime.mark_cancelled(key)
            if self.direct_bls is not None:
                self.direct_bls.cancelled(key)

    def _on_forget_region_msg(self, message: tuple) -> None:
        _, token = message
        self.regions.forget(token)

    def _on_is_ready_msg(self, message: tuple) -> None:
        threading.Thread(target=self._is_ready, name="pbserve-stub-is-ready",
                         daemon=True).start()

    def _on_forget_regions_msg(self, message: tuple) -> None:
        _, names = message
        self.regions.drop(names)

    def _on_trim_msg(self, message: tuple) -> None:
        self._trim(True)

    def _trim(self, force: bool) -> None:
        """Give back the pool's idle regions (every empty one with `force`); the parent
        unmaps them and tells the other stubs."""
        names = self.pool.trim(force) + self.gpu.trim(force)
        if names:
            self.send(p.regions_gone(tuple(names)))

    def _relieve_pressure(self, attempt: int) -> bool:
        """/dev/shm is full while this stub allocates (Pool.on_pressure): give back what
        it can, ask the others to, and give them a moment; the allocation waits so for
        the requests in flight elsewhere to give memory back, SHM_WAIT_S at most."""
        if attempt * PRESSURE_PAUSE_S > SHM_WAIT_S or not self._running:
            return False
        self._trim(True)
        self.send(p.shm_pressure())
        time.sleep(PRESSURE_PAUSE_S)
        return True

    def _free(self, frees: tuple) -> None:
        for region, offset in frees:
            if self.borrowed.give_back(region, offset):
                continue
            if is_cuda_token(region):
                self.gpu.free(region, offset)  # not ours: an input lent back as it was
                continue
            if not region.startswith(self.pool.prefix):
                continue  # a parent block this stub lent back without keeping it
            try:
                self.pool.free(region, offset)
            except ValueError as err:
                if self._running:  # once finalizing, the pool is closed: nothing to free
                    self.log_error(f"parent released an unknown block: {err}")

    # -- commands ---------------------------------------------------------------------
    def _model_class(self, model_path: str, backend_path: str = "") -> type:
        """Import model.py once (auto-complete and initialize share the import): the
        model's own, or a Python-based backend's (`backend_path`), which serves the model
        whose file is `model_path` (`get_model_dir()` is that model's version folder)."""
        if self.module is None:
            self.builtin_backend = bool(backend_path) and own_code(backend_path)
            directory = os.path.dirname(model_path)
            for utils in (backend_utils, triton_python_backend_utils):
                utils.get_model_dir = lambda: directory
            self.module = import_backend_module(backend_path) if backend_path \
                else import_model_module(model_path)
        return model_class(self.module)

    def on_auto_complete(self, model_path: str, config_json: str,
                         backend_path: str = "") -> None:
        """Run the class's `auto_complete_config` (Triton calls it on the class) and
        send the completed config back; None when the model has no such method. An
        error of the method says so (`auto_complete_config: ...`); one importing
        model.py (a syntax error, a missing package) is told as it is."""
        try:
            cls = self._model_class(model_path, backend_path)
        except BaseException as exc:  # noqa: BLE001 - the load fails with any error
            self.send(p.auto_completed(self.describe(exc), None))
            return
        if not hasattr(cls, "auto_complete_config"):
            self.send(p.auto_completed(None, None))
            return
        try:
            completed = cls.auto_complete_config(backend_utils.ModelConfig(config_json))
            if not isinstance(completed, backend_utils.ModelConfig):
                raise TypeError(
                    "auto_complete_config function must return a valid ModelConfig object, "
                    f"got '{type(completed).__name__}'")
            self.send(p.auto_completed(None, json.dumps(completed.as_dict())))
        except BaseException as exc:  # noqa: BLE001 - the load fails with any error
            self.send(p.auto_completed(f"auto_complete_config: {self.describe(exc)}", None))

    def on_init(self, args: dict, model_path: str, decoupled: bool,
                backend_path: str = "") -> None:
        try:
            self.decoupled = decoupled
            self.model_name = args.get("model_name", "")
            config = json.loads(args.get("model_config") or "{}")
            parameters = config.get("parameters", {})
            self.cancel_coroutines = parameters.get(CANCEL_COROUTINES, {}).get(
                "string_value", "").lower() in ("true", "yes", "1", "on")
            force_cpu = parameters.get(FORCE_CPU_ONLY_INPUT_TENSORS, {}).get(
                "string_value", "yes")
            if force_cpu not in ("yes", "no"):
                raise StubError(f"Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: "
                                f"{force_cpu}'")  # Triton's words, its stray quote too
            self.gpu_inputs = force_cpu == "no"
            self.batcher = StubBatcher.of(config)
            self.runtime = StubRuntime(self, decoupled, self.memory)
            _runtime.set_runtime(self.runtime)
            self.model = self._model_class(model_path, backend_path)()
            if hasattr(self.model, "initialize"):
                self.model.initialize(args)
        except BaseException as exc:  # noqa: BLE001 - the load fails with any error
            self.send(p.init_done(self.describe(exc), False))
            self._running = False
            return
        self.initialized = True
        self.send(p.init_done(None, hasattr(self.model, "is_ready"), self._warm_up()))

    def _warm_up(self) -> tuple[str, ...]:
        """Before READY, what a first request would do for the first time, so that it
        costs what the tenth does (issue 43): the pool's first region made and its first
        page faulted in, and the request path run once (and with it, in a forked stub,
        the zygote's pages it writes copied) on a synthetic request that `_echo`
        answers: never the model's `execute`. Nothing is sent. The regions the parent
        may map now; () if anything failed (the first request meets it again)."""
        try:
            region = self.pool.prepare()
            source = self.pool.alloc(WARM_BYTES)
            try:
                self._warm_request(source)
            finally:
                self.regions.drop([source.region])  # mapped by name, as a parent's region
                self.pool.free(source.region, source.offset)
                self.request_closed(WARM_KEY)
        except Exception:  # noqa: BLE001 - only a head start: the first request tells
            return ()
        return (region,)

    def _warm_request(self, source: Block) -> None:
        """`on_execute`'s steps on a request whose input is `source`, answered by `_echo`;
        its output block freed again."""
        self._time_gap()
        self._expect_request(WARM_POLL_NS)
        desc = ("INPUT", "FP32", (source.nbytes // 4,), source.region, source.offset,
                source.nbytes)
        msg = p.request_msg(key=WARM_KEY, request_id="", correlation_id=0, flags=0,
                            parameters_json="{}", timeout_us=0, requested=None,
                            inputs=(desc,), lendable=False, output_shm=None)
        requests = p.decode(p.encode((msg,)))  # as an EXECUTE brings them
        self.runtime.all_cancelled([r[REQ_KEY] for r in requests])
        built = [self._request(r, []) for r in requests]
        context = CURRENT_KEYS.set(tuple([r._key for r in built]))
        try:
            returned = _echo(built)
            inspect.iscoroutine(returned)
            responses = check_returned(returned, len(built), False, self.instance_name)
            _rescheduled(built, responses)
            msgs = tuple([(req._key, response_msg(resp, req._requested_output_names,
                                                  self.memory, req._output_shm,
                                                  req._gpu_outputs))
                          for req, resp in zip(built, responses)])
        finally:
            CURRENT_KEYS.reset(context)
        p.encode(p.responses(0, None, msgs, ()))
        for _, answer in msgs:
            for output in answer[1]:
                self.pool.free(output[3], output[4])

    def on_execute(self, batch_id: int, requests: tuple, frees: tuple) -> None:
        if frees:
            self._returned(frees)
            self._free(frees)
        if not self.decoupled and self.runtime.all_cancelled([r[REQ_KEY] for r in requests]):
            self._drop_cancelled(batch_id, requests)
            return
        lent: list[int] = []  # inputs that may be answered as they are, during this call
        try:
            built = [self._request(r, lent) for r in requests]
        except Exception as exc:  # noqa: BLE001 - e.g. a client's region it cannot map
            for pointer in lent:
                self.borrowed.unregister(pointer)
            for msg in requests:
                self.request_closed(msg[REQ_KEY])
            self._batch_failed(batch_id, exc)
            return
        keys = tuple([r._key for r in built])
        context = CURRENT_KEYS.set(keys)
        try:
            returned = self.model.execute(built)
            if inspect.iscoroutine(returned):
                returned = _on_behalf_of(keys, returned)
                if self.decoupled:
                    future = self.async_loop.submit(returned,
                                                    lambda exc: self._abort(built, exc))
                    if self.cancel_coroutines:
                        self.runtime.watch_coroutine(keys, future)
                    self._answer(p.batch_done(batch_id, None, ()))
                    return
                returned = self.async_loop.submit(returned, lambda exc: None).result()
            responses = check_returned(returned, len(built), self.decoupled,
                                       self.instance_name)
            rescheduled = _rescheduled(built, responses)
            if self.decoupled:
                self._answer(p.batch_done(batch_id, None, rescheduled))
                return
            msgs = tuple([(req._key, None if resp is None else
                           response_msg(resp, req._requested_output_names, self.memory,
                                        req._output_shm, req._gpu_outputs))
                          for req, resp in zip(built, responses)])
        except BaseException as exc:  # noqa: BLE001 - the batch fails, the stub lives
            for req in built:  # as Triton: the batch is over, its senders are closed
                req.get_response_sender()._close()
                self.request_closed(req._key)
            self._batch_failed(batch_id, exc)
            return
        finally:
            CURRENT_KEYS.reset(context)
            for key in lent:  # the parent may reuse these blocks once it has the answer
                if type(key) is tuple:
                    self.gpu.unlend(key)
                else:
                    self.borrowed.unregister(key)
        if self._origin == PARENT and max(keys) > LAST_PARENT_KEY:
            msgs = self._answer_frontends(msgs)
        self._batch_over(batch_id, None, msgs, rescheduled)
        for req, resp in zip(built, responses):  # after the answer: off its critical path
            if resp is not None:
                self.request_closed(req._key)

    def _drop_cancelled(self, batch_id: int, requests: tuple) -> None:
        """A batch that waited in this stub's queue and whose every request was cancelled
        meanwhile is answered without `execute`, as Triton drops a cancelled request
        before it runs."""
        error = (int(TritonError.CANCELLED), f"request for model '{self.model_name}' "
                                             f"was cancelled")
        answer = p.response_record(error, (), "{}")
        self._batch_over(batch_id, None, tuple([(r[REQ_KEY], answer) for r in requests]),
                         (), dropped=True)
        for r in requests:
            self.request_closed(r[REQ_KEY])

    def _batch_failed(self, batch_id: int, exc: BaseException) -> None:
        """Every request of the batch gets the error (logged with its traceback)."""
        error = (f"Failed to process the request(s) for model '{self.instance_name}', "
                 f"message: {self.describe(exc)}")
        self.log_error(error + "\n" + "".join(traceback.format_exception(exc)).rstrip())
        if self.decoupled:
            self._answer(p.batch_done(batch_id, error, ()))
        else:
            self._batch_over(batch_id, error, (), ())

    def _on_frontend_queues_msg(self, message: tuple) -> None:
        _, slot, requests, answers = message
        self.batcher.forget(origin_of(slot))  # the old frontend's, which died
        self.frontends.attach(slot, requests, answers)

    def _on_caller_queues_msg(self, message: tuple) -> None:
        _, origin, requests, answers, bell = message
        self.frontends.attach_caller(origin, requests, answers, bell)

    def _on_caller_gone_msg(self, message: tuple) -> None:
        _, origin = message
        self.frontends.forget(origin)

    def _answer(self, message: tuple, msgs: tuple = ()) -> None:
        """A batch's answer: to the parent, or to the frontend process that sent the
        batch (stub/frontends.py), with the outputs of `msgs` (its (key, ResponseMsg)
        pairs), which that frontend reads until it gives them back."""
        if self._origin == PARENT:
            self.send(message)
            return
        self._to_frontend(self._origin, message, p.answers_blocks(msgs))

    def _batch_over(self, batch_id: int, error: str | None, msgs: tuple, rescheduled: tuple,
                    dropped: bool = False) -> None:
        """The answer to a batch of a model that is not decoupled: RESPONSES (or
        DROPPED: answered without `execute`) by `_answer`, or for a batch of this stub's
        own batcher, each frontend its own (`_answer_own`)."""
        if self._origin == OWN_BATCH:
            self._answer_own(error, msgs, rescheduled, dropped)
        elif dropped:
            self._answer(p.dropped(batch_id, msgs))
        else:
            self._answer(p.responses(batch_id, error, msgs, rescheduled), msgs)

    def _answer_frontends(self, msgs: tuple) -> tuple:
        """A parent's batch holding frontend processes' requests (keys of theirs: the
        parent lets a frontend read this stub's answers so: Model.direct_route): each
        frontend gets its responses itself (ANSWERS), and the parent each of them
        without its outputs (it counts the request done)."""
        mine: list[tuple] = []
        theirs: dict[int, list[tuple]] = {}
        for key, msg in msgs:
            origin = origin_of_key(key)
            if origin == PARENT or msg is None:
                mine.append((key, msg))
                continue
            theirs.setdefault(origin, []).append((key, msg))
            mine.append((key, p.response_record(msg[p.RESP_ERROR], (), "{}")))
        for origin, entries in theirs.items():
            self._to_frontend(origin, p.answers(tuple(entries)), p.answers_blocks(entries))
        return tuple(mine)

    def respond(self, key: int, response: tuple | None, flags: int) -> None:
        """A decoupled model's SEND for request `key` (its ResponseMsg or None, its
        flags), from any thread: to the parent, or to the frontend process that sent the
        request (its key says which: stub/frontends.py), which reads its outputs."""
        origin = origin_of_key(key)
        if origin == PARENT:
            self.send(p.send(key, response, flags))
        else:
            self._to_frontend(origin, p.send(key, response, flags), () if response is None
                              else p.output_blocks(response[p.RESP_OUTPUTS]))

    def _to_frontend(self, origin: int, message: tuple, outputs: tuple) -> None:
        if not self.frontends.answer(origin, message, outputs):
            self.log_error(f"{self.frontends.name(origin)} does not read its answers: "
                           f"one of model instance '{self.instance_name}' was dropped")

    def _request(self, msg: tuple, lent: list[int]) -> InferenceRequest:
        # a RequestMsg (protocol.request_msg), read whole
        key, request_id, correlation_id, flags, params, timeout, requested, inputs, lendable, \
            output_shm, trace, gpu_outputs = msg
        if self.decoupled:  # only `_abort` asks, for a decoupled coroutine that raised
            with self._open_lock:
                self._open.add(key)
        lend_to = self.borrowed if lendable else None
        return InferenceRequest._incoming(
            inputs=input_tensors(inputs, self.regions, lend_to, lent, self.gpu, self.gpu_inputs),
            request_id=request_id,
            correlation_id=correlation_id, flags=flags, parameters_json=params,
            timeout=timeout, requested_output_names=requested or (),
            model_name="", model_version=-1, key=key, output_shm=output_shm,
            gpu_outputs=gpu_outputs,
            trace=None if trace is None else InferenceTrace._incoming(trace[1], trace[0]))

    def _abort(self, requests: list[InferenceRequest], exc: BaseException) -> None:
        """A decoupled coroutine raised (or was cancelled): close the requests it left open
        with the error (Triton leaves them hanging; the client would wait forever)."""
        if isinstance(exc, asyncio.CancelledError):
            code, message = TritonError.CANCELLED, "the request was cancelled"
        else:
            code = TritonError.INTERNAL
            message = f"Failed to process the request(s) for model '{self.instance_name}', " \
                      f"message: {self.describe(exc)}"
        for req in requests:
            with self._open_lock:
                still_open = req._key in self._open
            if still_open:
                self.respond(req._key, p.response_record((int(code), message), (), "{}"),
                             TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                self.request_closed(req._key)

    def on_sequence_terminated(self, correlation_id: int | str, reason: str) -> None:
        """pbserve's eviction notice (Triton has none): the model's optional
        `sequence_terminated` frees what it kept for a sequence that ended without END.
        Its errors are only logged."""
        hook = getattr(self.model, "sequence_terminated", None)
        if hook is None:
            return
        try:
            result = hook(correlation_id, reason)
            if inspect.iscoroutine(result):
                self.async_loop.submit(result, lambda exc: None).result()
        except BaseException as exc:  # noqa: BLE001 - only logged
            self.log_error(f"sequence_terminated of '{self.instance_name}' failed: "
                           f"{self.describe(exc)}")

    def _is_ready(self) -> None:
        """The model's `is_ready()` (sync or async), in a thread of its own: the control
        thread must go on delivering BLS answers meanwhile. The parent asks once at a
        time and bounds its wait."""
        try:
            ready = self.model.is_ready()
            if inspect.iscoroutine(ready):
                ready = self.async_loop.submit(ready, lambda exc: None).result()
            if not isinstance(ready, bool):
                raise StubError("is_ready() must return a boolean value")
        except BaseException as exc:  # noqa: BLE001 - not ready, with the reason
            self.send(p.readiness(self.describe(exc), False))
            return
        self.send(p.readiness(None, ready))

    def on_finalize(self) -> None:
        self.finalizing = True
        self.async_loop.close()
        if self.model is not None and hasattr(self.model, "finalize"):
            try:
                self.model.finalize()
            except BaseException as exc:  # noqa: BLE001 - finalize errors are only logged
                self.log_error(f"finalize of '{self.instance_name}' failed: {self.describe(exc)}")
        self.send(p.finalized())
        self._running = False

    def close(self) -> None:
        self._running = False
        self.calls.fail_all(f"model instance '{self.instance_name}' is shutting down")
        self.pool.close()
        self.regions.close()
        self.gpu.close()


def _echo(requests: list[InferenceRequest]) -> list:
    """What `_warm_up` runs in place of `execute`: each request's input as its output,
    through the pb_utils calls a model makes."""
    return [backend_utils.InferenceResponse(output_tensors=[backend_utils.Tensor(
        "OUTPUT", backend_utils.get_input_tensor_by_name(r, "INPUT").as_numpy())])
        for r in requests]


async def _on_behalf_of(keys: tuple, coroutine):
    """Run `coroutine` with CURRENT_KEYS set, in its task (child tasks inherit it)."""
    CURRENT_KEYS.set(keys)
    return await coroutine


def _rescheduled(requests: list[InferenceRequest], responses: list) -> tuple:
    """Keys of the requests released with RESCHEDULE; Triton wants None as their
    response."""
    keys = []
    for req, resp in zip(requests, responses):
        if req.release_flags() == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            if resp is not None:
                raise ExecuteReturnError(
                    "Expected a None object in the execute function return list for "
                    f"reschduled request, found type '{type(resp)}'.")
            keys.append(req._key)
    return tuple(keys)
