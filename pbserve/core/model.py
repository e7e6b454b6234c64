"""One loaded version of a model: its configuration, its instances and their outage,
and the entry points of its requests. A request goes through the model's admission
(scheduling/admission.py) to its scheduler, and its end is counted in its statistics
(observability/model_stats.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Callable

from pbserve.core.repository.execution_env import stub_python
from pbserve.model_backends import DEFAULT_BACKEND_DIRECTORY, PYTHON_BACKEND, \
    find_backend_model, framework_modules
from pbserve.core.instances.instance import (
    InstanceServices, ModelInstance)
from pbserve.core.instances.model_debug import ModelDebug
from pbserve.core.scheduling.admission import Admission
from pbserve.core.scheduling.delay_hooks import DELAY, held_count
from pbserve.core.scheduling.rate_limiter import RateLimiter
from pbserve.core.instances.supervisor import InstanceSpec, InstanceState
from pbserve.core.observability import metrics
from pbserve.core.observability.metrics import ModelStats
from pbserve.core.observability.model_stats import ModelAccounting
from pbserve.core.config.model_config import (
    apply_auto_complete, config_from_json, config_to_json, datatype_of, is_decoupled)
from pbserve.core.instances.outage import RESTART_WAIT_S, Outage
from pbserve.core.instances.stub_process import StubProcess
from pbserve.core.pending import PendingRequest
from pbserve.core.scheduling.scheduler import Scheduler
from pbserve.core.scheduling.sequence_batcher import SequenceBatcher
from pbserve.core.scheduling.stub_batching import batches_in_stub
from pbserve.core.types import InferRequest, InferResponse
from pbserve.core.observability.tracing import TRACER, Trace
from pbserve.core.instances.warmup import warm_up, warmup_samples
from pbserve.core.cache.cached_infer import infer_cached, new_load
from pbserve.core.cache.store import ResponseStore
from pbserve.errors import ErrorCode, ServerError
from pbserve.core.memory.block_refs import BlockRefs
from stub.frontends import origin_of
from tritonclient.grpc import model_config_pb2 as mc

STUB_END_WAIT_S = 5.0  # for the zygote's word that a stub a frontend saw end has ended
_KIND_NAME = {mc.ModelInstanceGroup.KIND_CPU: "CPU", mc.ModelInstanceGroup.KIND_GPU: "GPU",
              mc.ModelInstanceGroup.KIND_MODEL: "MODEL"}


@dataclass(frozen=True)
class ModelServices:
    """What every model of a server shares, built once by the manager: its instances'
    services (instance.py), the server's response cache (used by a model whose config
    enables it) and rate limiter (None: --rate-limit off), the options a model reads,
    and what to call after each request's final response."""

    instances: InstanceServices
    restart_wait_s: float = RESTART_WAIT_S
    cache: ResponseStore | None = None
    limiter: RateLimiter | None = None
    debug: ModelDebug = ModelDebug()
    backend_directory: Path = Path(DEFAULT_BACKEND_DIRECTORY)
    on_request_done: Callable[[], None] | None = None

    @property
    def refs(self) -> BlockRefs | None:
        return self.instances.refs


class Model:
    """One loaded version of a model. The `InstanceEvents` of its instances
    (instances/events.py): they tell it when a stub goes down and comes back (its
    outage); its scheduler hears from them when they can take a batch, and its
    `ModelAccounting` how batches and responses went."""

    def __init__(self, name: str, version: int, model_dir: Path, cfg: mc.ModelConfig,
                 services: ModelServices) -> None:
        self.name = name
        self.version = str(version)
        self.model_dir = model_dir
        self.cfg = cfg
        self.decoupled = is_decoupled(cfg)
        self.stats = ModelStats(name, self.version)
        self._accounting = ModelAccounting(self.stats, services.on_request_done)
        self._services = services
        self._python: str | None = None  # EXECUTION_ENV_PATH's interpreter
        self._log = logging.getLogger(f"pbserve.model.{name}")
        self._admission: Admission | None = None  # made from the completed config
        self.scheduler: Scheduler | SequenceBatcher | None = None  # the admission's
        self.instances: list[ModelInstance] = []
        self._outage = Outage(name, services.restart_wait_s, self._fail_queued)
        self._cache: ResponseStore | None = None  # the server's, if the config enables it
        self._answerable = False  # `_set_config`
        self._stub_batches = False  # ... and whose dynamic batcher may be its stub's
        self._cache_load = new_load()  # this load's entries only (cached_infer.py)

    @property
    def model_path(self) -> Path:
        return self.model_dir / self.version / (self.cfg.default_model_filename or "model.py")

    @property
    def backend_path(self) -> str:
        """The model.py of a Python-based backend serving this model (pbserve/model_backends:
        ONNX Runtime, PyTorch, --backend-directory); "" for a Python model."""
        if self.cfg.backend == PYTHON_BACKEND:
            return ""
        found = find_backend_model(self.cfg.backend, self.model_dir, self.version,
                                   self._services.backend_directory)
        return str(found) if found is not None else ""

    async def not_ready_reason(self) -> str | None:
        """Why the loaded model is not ready (Triton's words), None when it is: readiness
        follows the stubs (a dead or restarting one makes the model not ready), then
        asks the model's own `is_ready()` in every instance, if it has one."""
        if self._outage.error is not None:  # no instance could come back in time
            return self._outage.error.message
        if not self.instances:
            return "the model has no instances"
        for instance in self.instances:
            if instance.state is not InstanceState.READY:
                return f"Stub process '{instance.name}' is not healthy."
        reasons = await asyncio.gather(
            *(i.readiness.not_ready_reason() for i in self.instances))
        return next((reason for reason in reasons if reason is not None), None)

    # -- lifecycle --------------------------------------------------------------------
    async def load(self, auto_complete: bool = True) -> None:
        """Run auto-complete in the first instance's stub, then start every instance
        (in parallel); if one fails, stop the others and raise."""
        self._python = await asyncio.to_thread(stub_python, self.cfg, self.model_dir)
        self._create_instances()
        try:
            first = self.instances[0]
            await first.launch()
            completed = await first.auto_complete(config_to_json(self.cfg)) \
                if auto_complete else None
            self._set_config(apply_auto_complete(
                self.cfg, config_from_json(completed) if completed else self.cfg))
            samples = warmup_samples(self.cfg, self.model_dir)
        except BaseException:
            await self.unload()
            raise
        results = await asyncio.gather(*(i.start() for i in self.instances),
                                       return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if not errors and samples:
            results = await asyncio.gather(
                *(warm_up(i, samples, self._admission.warmup_request)
                  for i in self.instances), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            self.stats.reset()  # warmup is not counted
        if errors:
            await self.unload()
            raise errors[0]

    def _create_instances(self) -> None:
        """The instances of every group, not started. The first one runs auto-complete,
        so the scheduler is made later, from the completed config (`_set_config`)."""
        backend_path = self.backend_path
        preload = framework_modules(backend_path)
        debug = self._services.debug
        for group_index, group in enumerate(self.cfg.instance_group):
            group_name = group.name or f"{self.name}_{group_index}"
            # As Triton: a KIND_GPU group has `count` instances on each of its GPUs.
            devices = list(group.gpus) if group.kind == mc.ModelInstanceGroup.KIND_GPU \
                else [0]
            placements = [d for d in devices for _ in range(max(group.count, 1))]
            for i, device in enumerate(placements):
                instance_name = f"{group_name}_{i}"
                args = (  # `initialize`'s; "model_config" comes with _set_config
                    ("model_instance_kind", _KIND_NAME.get(group.kind, "CPU")),
                    ("model_instance_name", instance_name),
                    ("model_instance_device_id", str(device)),
                    ("model_repository", str(self.model_dir)),
                    ("model_version", self.version),
                    ("model_name", self.name),
                )
                spec = InstanceSpec(self.name, self.version, instance_name,
                                    str(self.model_path), args, self._python,
                                    backend_path, debug.stub_args(self.name), preload)
                instance = ModelInstance(spec, self._services.instances, self, self._accounting,
                                         self._log)
                self.instances.append(instance)
                self._limit(instance, group, device)
                if debug.debugs(self.name):  # its one stub gets the terminal
                    self._log.warning("--model-debug: model '%s' runs a single instance, %s",
                                      self.name, instance_name)
                    return

    def _limit(self, instance: ModelInstance, group: mc.ModelInstanceGroup,
               device: int) -> None:
        """Under --rate-limit execution_count, the instance's place in the rate limiter
        (its group's rate_limiter config); Triton's load error if it cannot work."""
        limiter = self._services.limiter
        if limiter is None or not group.HasField("rate_limiter"):
            return
        config = group.rate_limiter
        try:
            instance.limit = limiter.add(
                instance.name, [(r.name, r.count, getattr(r, "global")) for r in
                                config.resources], device, config.priority)
        except ServerError:
            self._unlimit()
            raise

    def _unlimit(self) -> None:
        limiter = self._services.limiter
        for instance in self.instances:
            if instance.limit is not None and limiter is not None:
                limiter.remove(instance.limit)
            instance.limit = None

    def _set_config(self, cfg: mc.ModelConfig) -> None:
        """Adopt the completed config: what `initialize` gets, requests are checked by
        (the admission) and the scheduler is chosen by (the admission makes it)."""
        self.cfg = cfg
        self.decoupled = is_decoupled(cfg)
        # (decoupled and sequence-batched models cannot enable it: config_checks.py)
        self._cache = self._services.cache if cfg.response_cache.enable else None
        self.stats.cache_enabled = self._cache is not None
        # whose stubs may answer a frontend's requests themselves (`_answered_instances`;
        # an instance whose stub no frontend reads answers the core: ModelInstance._send)
        self._answerable = not self.decoupled and self._cache is None and (
            cfg.HasField("sequence_batching") or cfg.HasField("dynamic_batching")
            and not cfg.dynamic_batching.preserve_ordering)
        self._stub_batches = batches_in_stub(cfg)
        self._admission = Admission(self.name, self.version, cfg, self.stats,
                                    self._services.refs, self._outage)
        self.scheduler = scheduler = self._admission.scheduler
        scheduler.instances = self.instances
        config_json = config_to_json(cfg)
        for instance in self.instances:
            instance.configure(config_json, self.decoupled, scheduler)

    def direct_route(self, slot: int) -> tuple | None:
        """What frontend process `slot` needs to send this model's requests to its stubs
        itself (docs/frontend_processes.md): its version, its config (serialized, for
        validation), each READY instance's queue names (to its stub, from it), its
        stub's bell, pid and instance name, whether the requests go through the core
        (`scheduled`: a dynamic or sequence batcher's; the stubs answer the frontend
        themselves), and whether they go to the stub's own batcher (`batched`:
        scheduling/stub_batching.py).
        None where requests and answers must pass through the core
        (`_direct_instances`, `_answered_instances`)."""
        batched = self._stub_batches and len(self.instances) == 1
        instances = self._direct_instances(batched)
        scheduled = instances is None
        if scheduled:
            instances = self._answered_instances()
            if instances is None:
                return None
        stubs = []
        for instance in instances:
            stub = instance.stub
            if len(stub.frontend_queues) <= slot:
                return None
            stubs.append((*stub.frontend_queues[slot], stub.bell_name, stub.pid,
                          instance.name))
        if scheduled:  # the frontend reads their answers from now on
            for instance in instances:
                instance.stub.answers_read_by.add(origin_of(slot))
        return self.version, self.cfg.SerializeToString(), tuple(stubs), scheduled, \
            batched and not scheduled

    def caller_route(self, caller: object, origin: int, bell: str
                     ) -> tuple[tuple, list[StubProcess]] | None:
        """What the stub of `origin` (instance `caller`, woken by posting `bell`) needs
        to send this model BLS calls itself (stub/direct_bls.py): the model's version,
        max_batch_size, inputs (name, datatype, dims, optional) and output names, and
        each READY instance's queue names (from that stub, to it), its stub's bell, pid,
        instance name; with the stub processes that made queues for it. None where the
        calls must pass through the core: as `direct_route`, and a decoupled model (the
        core refuses a unary call to it), the caller's own model, an input with a reshape
        or a shape tensor."""
        instances = self._direct_instances()
        cfg = self.cfg
        if instances is None or self.decoupled or caller in instances \
                or any([i.HasField("reshape") or i.is_shape_tensor for i in cfg.input]):
            return None
        stubs, processes = [], []
        for instance in instances:
            stub = instance.stub
            stubs.append((*stub.caller_queues(origin, bell), stub.bell_name, stub.pid,
                          instance.name))
            processes.append(stub)
        inputs = tuple((i.name, datatype_of(i.data_type), tuple(i.dims), i.optional)
                       for i in cfg.input)
        return (self.version, cfg.max_batch_size, inputs, tuple(o.name for o in cfg.output),
                tuple(stubs)), processes

    def _direct_instances(self, batched: bool = False) -> list[ModelInstance] | None:
        """The instances whose stubs take requests from other processes directly; None
        where requests must pass through the core: a batcher (but a dynamic one the
        stub runs, when `batched`), the response cache, the rate limiter, tracing,
        Triton's scheduler test hook (delay_hooks.py), an instance not READY, a stub
        without a bell (a server without frontend processes)."""
        cfg = self.cfg
        if cfg.HasField("dynamic_batching") and not batched \
                or cfg.HasField("sequence_batching") or self._cache is not None \
                or TRACER.enabled or not self.instances or held_count(DELAY):
            return None
        for instance in self.instances:
            stub = instance.stub
            if instance.limit is not None or instance.state is not InstanceState.READY \
                    or stub is None or not stub.has_bell:
                return None
        return self.instances

    def _answered_instances(self) -> list[ModelInstance] | None:
        """The instances whose stubs answer a frontend's requests themselves, which the
        core schedules (a dynamic or sequence batcher's: stub/stub.py
        `_answer_frontends`); None where answers must pass through the core: a decoupled
        model, preserve_ordering, the response cache, tracing, an instance not READY, a
        stub without a bell."""
        if not self._answerable or TRACER.enabled or not self.instances:
            return None
        for instance in self.instances:
            stub = instance.stub
            if instance.state is not InstanceState.READY or stub is None \
                    or not stub.has_bell:
                return None
        return self.instances

    def read_stubs(self) -> None:
        """What the stubs sent and the core has not read yet, read now: a stub's own
        batcher tells its statistics without waking the core (stub/batcher.py, BATCHES),
        so they are read before the statistics are."""
        if self._stub_batches:
            for instance in self.instances:
                stub = instance.stub
                if stub is not None:
                    stub.read_now()

    def add_direct_stats(self, *figures: int) -> None:
        """What requests a frontend process sent to this model's stubs itself added to
        its statistics (ModelAccounting.direct_requests)."""
        self._accounting.direct_requests(*figures)

    def add_direct_responses(self, figures: dict) -> None:
        """A decoupled model's response statistics of requests a frontend process sent to
        its stubs itself (ResponseStats.figures)."""
        self._accounting.direct_responses(figures)

    def cancel_direct(self, instance_name: str, key: int) -> None:
        """A frontend's direct request `key` on that instance was cancelled."""
        for instance in self.instances:
            if instance.name == instance_name:
                instance.cancel_direct(key)

    async def stub_ended(self, instance_name: str, pid: int) -> None:
        """A frontend saw stub `pid` of that instance end: returns once this process
        has seen it too (the instance failed what it held and restarts: a request that
        comes now waits for it), STUB_END_WAIT_S at most; at once if the instance runs
        another stub by now."""
        for instance in self.instances:
            stub = instance.stub
            if instance.name == instance_name and stub is not None and stub.pid == pid:
                await stub.wait_exit(STUB_END_WAIT_S)

    def retire(self) -> None:
        """Unloading or shutting down: no instance is restarted from now on."""
        for instance in self.instances:
            instance.retire()

    # -- InstanceEvents (instances/events.py) --------------------------------------------
    def instance_down(self, instance: ModelInstance, cause: str, restart_failed: bool
                      ) -> None:
        """An instance's stub died, or a restart of it failed: with no instance left to
        run, queued requests wait for one only so long (outage.py)."""
        if restart_failed:
            self.stats.restart_failures += 1
        if not any(i.state is InstanceState.READY for i in self.instances):
            self._outage.begin(cause)

    def instance_up(self, instance: ModelInstance) -> None:
        self._outage.end()

    def _fail_queued(self, error: ServerError) -> None:
        """The outage lasted too long: what is queued gets `error`."""
        if self.scheduler is not None:
            for pending in self.scheduler.take_queued():
                self._admission.fail(pending, error)

    def end_requests(self, error: ServerError) -> int:
        """Shutdown's time is up: what is queued or running gets `error`. How many."""
        count = 0
        if self.scheduler is not None:
            for pending in self.scheduler.take_queued():
                self._admission.fail(pending, error)
                count += 1
        return count + sum(i.end_requests(error) for i in self.instances)

    async def unload(self) -> None:
        """Fail what is queued, finalize every instance (their in-flight work first)."""
        self.retire()
        self._outage.end()
        if self.scheduler is not None:
            for pending in self.scheduler.drain():
                self._admission.fail(pending, ServerError(
                    ErrorCode.UNAVAILABLE, f"model '{self.name}' is being unloaded"))
            self.scheduler.close()
        await self._wait_idle()
        await asyncio.gather(*(i.stop() for i in self.instances), return_exceptions=True)
        self._unlimit()
        self.instances = []

    async def _wait_idle(self, timeout: float = 30.0) -> None:
        """Wait (bounded) until no instance runs a batch or owes a response. Streams of a
        decoupled model are not waited for: `finalize` ends them (the requests get an
        error), as a stream may run for as long as its client likes."""
        deadline = time.monotonic() + timeout
        while any(i.busy or i.staged or (i.inflight and not self.decoupled)
                  for i in self.instances) \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    # -- requests ---------------------------------------------------------------------
    async def infer(self, request: InferRequest, descs: tuple | None = None) -> InferResponse:
        if self.decoupled:
            raise unary_on_decoupled(self.name, request.id)
        if self._cache is not None and descs is None and not request.uses_shm:
            return await self._infer_cached(self._cache, request)
        return await self._infer(request, descs)

    async def _infer_cached(self, cache: ResponseStore, request: InferRequest
                            ) -> InferResponse:
        """Answered from the response cache, or run and its response kept."""
        admission = self._admission
        admission.validator.validate(request)  # a bad request fails as it would uncached
        requested = tuple(request.requested_outputs or admission.output_names)
        response = await infer_cached(cache, self.stats, self.name, self.version, request,
                                      requested, lambda: self._infer(request, None),
                                      self._cache_load)
        done = self._services.on_request_done
        if done is not None:  # a hit, too, keeps the loop turning a while
            done()
        return response

    async def _infer(self, request: InferRequest, descs: tuple | None) -> InferResponse:
        trace = self._trace(request)
        pending = self._admission.submit(request, streaming=False, descs=descs) \
            if trace is None else self._traced_submit(trace, request, False, descs)
        assert pending.future is not None
        try:
            response = await pending.future
        except asyncio.CancelledError:
            self.cancel(pending)
            if trace is not None:  # its caller is gone: the trace ends now
                trace.finish(pending.arrival_ns, pending.exec_start_ns, time.monotonic_ns())
            raise
        if trace is not None:
            trace.finish(pending.arrival_ns, pending.exec_start_ns, time.monotonic_ns())
        self._accounting.completed(pending, response)
        return response

    def infer_now(self, request: InferRequest, descs: tuple | None,
                  answer: Callable[[PendingRequest, InferResponse], None],
                  key: int = 0) -> PendingRequest:
        """`infer` without a coroutine, for a request no trace may sample (it has no
        parent trace and tracing is off: `infer` is the way that ends a trace). The
        request is queued now, and `answer` gets its response in the pass that read it,
        its statistics already counted (a stub's BLS call, stub_calls/bls.py: no turn of the
        event loop on either way). Raises what validation raises; `cancel` drops it, and
        `answer` still gets whatever comes after. `key`: a frontend process's key for
        it, whose stub answers that frontend itself, where the model lets it
        (`direct_route`; its response here then is `answered`, without outputs)."""
        if self.decoupled:
            raise unary_on_decoupled(self.name, request.id)
        if key and not self._answerable:
            key = 0
        return self._admission.submit(request, streaming=False, descs=descs,
                                      sink=self._counted(answer), key=key)

    def queue_made(self, request: InferRequest, msg: tuple, batch_size: int,
                   answer: Callable[[PendingRequest, InferResponse], None]
                   ) -> PendingRequest:
        """`infer_now` for a request a frontend process validated and made the stub's
        message of, under its own key (frontends/direct.py `stub_message`; its inputs in
        that frontend's pool): queued as it came (Admission.submit_made). Its stub
        answers the frontend itself where the model lets it (`direct_route`), else
        this process (then under a key of its own)."""
        if self.decoupled:
            raise unary_on_decoupled(self.name, request.id)
        return self._admission.submit_made(request, msg, batch_size, self._counted(answer),
                                           self._answerable)

    def _counted(self, answer: Callable[[PendingRequest, InferResponse], None]
                 ) -> Callable[[PendingRequest, InferResponse], None]:
        """`answer`, after a final response's statistics are counted (a sink of
        Admission.submit: no coroutine awaits the response to count it)."""
        def completed(pending: PendingRequest, response: InferResponse) -> None:
            if response.final and not pending.cancelled:
                self._accounting.completed(pending, response)
            answer(pending, response)
        return completed

    async def stream_infer(self, request: InferRequest, descs: tuple | None = None,
                           on_submit: Callable[[PendingRequest], None] | None = None
                           ) -> AsyncIterator[InferResponse]:
        """The request's responses, the final one last. `on_submit` gets the queued
        request (for `ask_to_cancel`)."""
        trace = self._trace(request)
        pending = self._admission.submit(request, streaming=True, descs=descs) \
            if trace is None else self._traced_submit(trace, request, True, descs)
        if on_submit is not None:
            on_submit(pending)
        assert pending.stream is not None
        errors = 0
        try:
            while True:
                response = await pending.stream.get()
                errors += response.error is not None
                if response.final:
                    # As Triton: the model's own error responses do not fail the request
                    failed = errors > pending.model_errors
                    if trace is not None:
                        trace.finish(pending.arrival_ns, pending.exec_start_ns,
                                     time.monotonic_ns())
                        trace = None
                    self._accounting.completed(pending,
                                              response if not failed else _failed(response))
                    yield response
                    return
                yield response
        finally:
            if not pending.done:
                self.cancel(pending)
            if trace is not None:  # its reader is gone before the final response
                trace.finish(pending.arrival_ns, pending.exec_start_ns, time.monotonic_ns())

    def _trace(self, request: InferRequest) -> Trace | None:
        """The request's trace, if sampled: a child of the trace of the request it is
        made for (an ensemble's step), else by the model's trace setting."""
        parent = request._trace_parent
        if parent is not None:
            return parent.child(self.name, self.version, request.id)
        return TRACER.sample(self.name, self.version, request.id, request.trace_headers) \
            if TRACER.enabled else None

    def _traced_submit(self, trace: Trace, request: InferRequest, streaming: bool,
                       descs: tuple | None) -> PendingRequest:
        """`Admission.submit`; a request refused on the way (validation) still ends its
        trace."""
        try:
            pending = self._admission.submit(request, streaming=streaming, descs=descs,
                                             trace=(trace.id, trace.context))
        except BaseException:
            trace.finish(0, 0, 0)
            raise
        return pending

    def expect_request(self) -> None:
        """A frontend is decoding a request for this model (a hint, nothing is queued):
        the instance that will take it may get ready (Scheduler.expect_request). Only
        when none of the model's requests is in flight: under load the instances are
        kept busy anyway, and an early wake-up would only take CPU from the others. Not
        for a model whose requests may be answered by the response cache: a hit would
        have woken its stub for nothing."""
        if self.scheduler is not None and not self.stats.pending and self._cache is None:
            self.scheduler.expect_request()

    def cancel(self, pending: PendingRequest) -> None:
        """The client went away: a queued request is dropped before `execute`, a running
        one sees `is_cancelled()` become true. Its responses are released unread."""
        if pending.cancelled or pending.done:
            return
        pending.cancelled = True
        self.stats.pending -= 1
        self.stats.failures[metrics.CANCELED] += 1
        if pending.instance is not None:
            pending.instance.cancel(pending.key)
        elif self.scheduler is not None and self.scheduler.remove(pending):
            self._admission.fail(pending, ServerError(
                ErrorCode.CANCELLED, f"request for model '{self.name}' was cancelled"))

    def ask_to_cancel(self, pending: PendingRequest) -> None:
        """Cancel a request whose caller goes on reading its responses (a BLS stream's
        `ResponseIterator.cancel()`): a running one sees `is_cancelled()` and may go on
        sending until its final flag; a queued one ends with a CANCELLED error."""
        if pending.done:
            return
        if pending.instance is not None:
            pending.instance.cancel(pending.key)
        elif self.scheduler is not None and self.scheduler.remove(pending):
            self._admission.fail(pending, ServerError(
                ErrorCode.CANCELLED, f"request for model '{self.name}' was cancelled"))

def unary_on_decoupled(model_name: str, request_id: str) -> ServerError:
    """A request for one response to a decoupled model (or ensemble): refused."""
    return ServerError(ErrorCode.UNSUPPORTED, (
        f"[request id: {request_id or '<id_unknown>'}] model '{model_name}' is using the "
        f"decoupled transaction policy: use streaming (gRPC ModelStreamInfer or HTTP "
        f"generate_stream) to receive its responses"))


def _failed(response: InferResponse) -> InferResponse:
    """A stand-in that counts a stream with an error response not the model's as failed."""
    return InferResponse(response.model_name, response.model_version, response.id,
                         error=ServerError(ErrorCode.INTERNAL, "stream had an error"))
