"""One loaded version of a model: its instances, its scheduler, its request path."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Callable

from pbserve.core.repository.execution_env import stub_python
from pbserve.model_backends import DEFAULT_BACKEND_DIRECTORY, PYTHON_BACKEND, find_backend_model
from pbserve.core.instances.instance import (
    InstanceServices, ModelInstance)
from pbserve.core.instances.model_debug import ModelDebug
from pbserve.core.scheduling.rate_limiter import RateLimiter
from pbserve.core.instances.supervisor import InstanceSpec, InstanceState
from pbserve.core.observability import metrics
from pbserve.core.observability.metrics import ModelStats
from pbserve.core.observability.response_stats import CANCEL, EMPTY, FAIL, SUCCESS
from pbserve.core.config.model_config import (
    apply_auto_complete, config_from_json, config_to_json, is_decoupled)
from pbserve.core.instances.outage import RESTART_WAIT_S, Outage
from pbserve.core.pending import PendingRequest
from pbserve.core.scheduling.scheduler import Scheduler
from pbserve.core.scheduling.sequence_batcher import SequenceBatcher
from pbserve.core.types import InferRequest, InferResponse
from pbserve.core.observability.tracing import TRACER, Trace
from pbserve.core.validation import RequestValidator
from pbserve.core.instances.warmup import warm_up, warmup_samples
from pbserve.core.cache.cached_infer import infer_cached, new_load
from pbserve.core.cache.response_cache import ResponseCache
from pbserve.errors import ErrorCode, ServerError
from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.memory.shm_upkeep import (
    SHM_WAIT_S, shm_capacity, too_large_message, waited_message)
from shm.region import ShmExhausted
from shm.pool import Block
from stub import protocol as p
from tritonclient.grpc import model_config_pb2 as mc

_KIND_NAME = {mc.ModelInstanceGroup.KIND_CPU: "CPU", mc.ModelInstanceGroup.KIND_GPU: "GPU",
              mc.ModelInstanceGroup.KIND_MODEL: "MODEL"}
_keys = itertools.count(1)
# A request waits in a busy stub's queue (ModelInstance.can_queue_another) only with inputs
# up to this size: there they hold shm that a running request may need for its outputs.
AHEAD_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class ModelServices:
    """What every model of a server shares, built once by the manager: its instances'
    services (instance.py), the server's response cache (used by a model whose config
    enables it) and rate limiter (None: --rate-limit off), the options a model reads,
    and what to call after each request's final response."""

    instances: InstanceServices
    restart_wait_s: float = RESTART_WAIT_S
    cache: ResponseCache | None = None
    limiter: RateLimiter | None = None
    debug: ModelDebug = ModelDebug()
    backend_directory: Path = Path(DEFAULT_BACKEND_DIRECTORY)
    on_request_done: Callable[[], None] | None = None

    @property
    def refs(self) -> BlockRefs | None:
        return self.instances.refs



class Model:
    """One loaded version of a model. The `InstanceEvents` of its instances
    (instances/events.py): they tell it when they can take a batch and how one ended."""

    def __init__(self, name: str, version: int, model_dir: Path, cfg: mc.ModelConfig,
                 services: ModelServices) -> None:
        self.name = name
        self.version = str(version)
        self.model_dir = model_dir
        self.cfg = cfg
        self.decoupled = is_decoupled(cfg)
        self.stats = ModelStats(name, self.version)
        self._model_services = services
        self._refs = services.refs
        self._services = services.instances
        self._on_request_done = services.on_request_done  # after each final response
        self._stages = False  # whether requests are queued with their inputs out of shm
        self._python: str | None = None  # EXECUTION_ENV_PATH's interpreter
        self._validator: RequestValidator | None = None
        self._output_names: tuple[str, ...] = ()  # the config's, for requests naming none
        self._log = logging.getLogger(f"pbserve.model.{name}")
        self.scheduler: Scheduler | SequenceBatcher | None = None
        self.instances: list[ModelInstance] = []
        self._outage = Outage(name, services.restart_wait_s, self._fail_queued)
        self._server_cache = services.cache
        self._cache: ResponseCache | None = None  # the server's, if the config enables it
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
                                   self._model_services.backend_directory)
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
                *(warm_up(i, samples, self._warmup_request) for i in self.instances),
                return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            self.stats = ModelStats(self.name, self.version)  # warmup is not counted
            self.stats.cache_enabled = self._cache is not None
        if errors:
            await self.unload()
            raise errors[0]

    def _warmup_request(self, request: InferRequest) -> PendingRequest:
        """A warmup request (warmup.py), validated and in shared memory, for an
        instance to run directly (no scheduler, no statistics)."""
        batch_size = self._validator.validate(request)
        descs, blocks = self._copy_inputs(request, batch_size)
        key = next(_keys)
        msg = p.request_msg(key=key, request_id=request.id,
                            correlation_id=request.correlation_id, flags=request.flags,
                            parameters_json="{}", timeout_us=0, requested=self._output_names,
                            inputs=descs, lendable=False, output_shm=None)
        return PendingRequest(key, request, msg, blocks, batch_size, self._free_blocks,
                              streaming=self.decoupled)

    def _create_instances(self) -> None:
        """The instances of every group, not started. The first one runs auto-complete,
        so the scheduler is made later, from the completed config (`_set_config`)."""
        backend_path = self.backend_path
        debug = self._model_services.debug
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
                                    backend_path, debug.stub_args(self.name))
                instance = ModelInstance(spec, self._services, self, self._log)
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
        limiter = self._model_services.limiter
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
        limiter = self._model_services.limiter
        for instance in self.instances:
            if instance.limit is not None and limiter is not None:
                limiter.remove(instance.limit)
            instance.limit = None

    def _set_config(self, cfg: mc.ModelConfig) -> None:
        """Adopt the completed config: what `initialize` gets and requests are checked by."""
        self.cfg = cfg
        self.decoupled = is_decoupled(cfg)
        self._validator = RequestValidator(cfg)
        self._output_names = tuple(o.name for o in cfg.output)
        # (decoupled and sequence-batched models cannot enable it: config_checks.py)
        self._cache = self._server_cache if cfg.response_cache.enable else None
        self.stats.cache_enabled = self._cache is not None
        self.scheduler = self._new_scheduler(cfg)
        self.scheduler.instances = self.instances
        config_json = config_to_json(cfg)
        for instance in self.instances:
            instance.configure(config_json, self.decoupled)

    def _new_scheduler(self, cfg: mc.ModelConfig) -> Scheduler | SequenceBatcher:
        """Triton's choice: the sequence batcher when configured, else the dynamic
        batcher or the default scheduler. Only the latter's requests wait with their
        inputs out of shm (the sequence batcher edits the message it queues)."""
        if cfg.HasField("sequence_batching"):
            self._stages = False
            return SequenceBatcher(cfg, self.add_control_tensor)
        self._stages = True
        return Scheduler(cfg, self._stage, self._may_wait_ahead)

    def retire(self) -> None:
        """Unloading or shutting down: no instance is restarted from now on."""
        for instance in self.instances:
            instance.retire()

    # -- InstanceEvents (instances/events.py) --------------------------------------------
    def instance_idle(self, instance: ModelInstance) -> None:
        if self.scheduler is not None:
            self.scheduler.on_idle(instance)

    def reschedule(self, pending: PendingRequest) -> None:
        assert self.scheduler is not None
        self.scheduler.reschedule(pending)

    def requeue(self, batch: list[PendingRequest]) -> None:
        # only the default scheduler's instances queue a batch ahead (can_queue_another)
        assert isinstance(self.scheduler, Scheduler)
        self.scheduler.requeue(batch)

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

    def batch_done(self, batch: list[PendingRequest]) -> None:
        """A batch ended: the model's execution statistics (Triton's)."""
        stats = self.stats
        stats.exec_count += 1
        if not batch or not batch[0].exec_start_ns:
            return
        now = time.monotonic_ns()
        if len(batch) == 1:  # the common case, without the sums
            pending = batch[0]
            size, input_ns, output_ns = pending.batch_size or 1, pending.input_ns, \
                pending.output_ns
        else:
            # The batch that ran: its requests' batch dimensions added up, as Triton.
            size = sum([pending.batch_size or 1 for pending in batch])
            input_ns = sum([pending.input_ns for pending in batch])
            output_ns = sum([pending.output_ns for pending in batch])
        figures = stats.batches.get(size)
        if figures is None:
            figures = stats.batches[size] = [0, 0, 0, 0]
        figures[0] += 1
        figures[1] += now - batch[0].exec_start_ns
        figures[2] += input_ns
        figures[3] += output_ns
        for pending in batch:  # added to the model's figures if it succeeds (_completed)
            if pending.exec_start_ns:
                pending.compute_ns = now - pending.exec_start_ns

    def responded(self, pending: PendingRequest, error: bool, empty: bool,
                  arrived_ns: int) -> None:
        """A decoupled model's response: its response statistics by index."""
        if not self.decoupled:
            return
        now = time.monotonic_ns()
        outcome = CANCEL if pending.cancelled else FAIL if error else EMPTY if empty \
            else SUCCESS
        since = pending.last_response_ns or pending.exec_start_ns or arrived_ns
        self.stats.responses.add(pending.responses, outcome, max(arrived_ns - since, 0),
                                 now - arrived_ns)
        pending.responses += 1
        pending.last_response_ns = now

    def _fail_queued(self, error: ServerError) -> None:
        """The outage lasted too long: what is queued gets `error`."""
        if self.scheduler is not None:
            for pending in self.scheduler.take_queued():
                pending.deliver(self._error(pending, error))

    def end_requests(self, error: ServerError) -> int:
        """Shutdown's time is up: what is queued or running gets `error`. How many."""
        count = 0
        if self.scheduler is not None:
            for pending in self.scheduler.take_queued():
                pending.deliver(self._error(pending, error))
                count += 1
        return count + sum(i.end_requests(error) for i in self.instances)

    async def unload(self) -> None:
        """Fail what is queued, finalize every instance (their in-flight work first)."""
        self.retire()
        self._outage.end()
        if self.scheduler is not None:
            for pending in self.scheduler.drain():
                pending.deliver(self._error(pending, ServerError(
                    ErrorCode.UNAVAILABLE, f"model '{self.name}' is being unloaded")))
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

    async def _infer_cached(self, cache: ResponseCache, request: InferRequest
                            ) -> InferResponse:
        """Answered from the response cache, or run and its response kept."""
        self._validator.validate(request)  # a bad request fails as it would uncached
        requested = tuple(request.requested_outputs or self._output_names)
        response = await infer_cached(cache, self.stats, self.name, self.version, request,
                                      requested, lambda: self._infer(request, None),
                                      self._cache_load)
        if self._on_request_done is not None:  # a hit, too, keeps the loop turning a while
            self._on_request_done()
        return response

    async def _infer(self, request: InferRequest, descs: tuple | None) -> InferResponse:
        trace = self._trace(request)
        pending = self._submit(request, streaming=False, descs=descs) if trace is None \
            else self._traced_submit(trace, request, False, descs)
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
        self._completed(pending, response)
        return response

    def infer_now(self, request: InferRequest, descs: tuple | None,
                  answer: Callable[[PendingRequest, InferResponse], None]) -> PendingRequest:
        """`infer` without a coroutine, for a request no trace may sample (it has no
        parent trace and tracing is off: `infer` is the way that ends a trace). The
        request is queued now, and `answer` gets its response in the pass that read it,
        its statistics already counted (a stub's BLS call, stub_calls/bls.py: no turn of the
        event loop on either way). Raises what validation raises; `cancel` drops it, and
        `answer` still gets whatever comes after."""
        if self.decoupled:
            raise unary_on_decoupled(self.name, request.id)

        def completed(pending: PendingRequest, response: InferResponse) -> None:
            if response.final and not pending.cancelled:
                self._completed(pending, response)
            answer(pending, response)
        return self._submit(request, streaming=False, descs=descs, sink=completed)

    async def stream_infer(self, request: InferRequest, descs: tuple | None = None,
                           on_submit: Callable[[PendingRequest], None] | None = None
                           ) -> AsyncIterator[InferResponse]:
        """The request's responses, the final one last. `on_submit` gets the queued
        request (for `ask_to_cancel`)."""
        trace = self._trace(request)
        pending = self._submit(request, streaming=True, descs=descs) if trace is None \
            else self._traced_submit(trace, request, True, descs)
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
                    self._completed(pending, response if not failed else _failed(response))
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
        """`_submit`; a request refused on the way (validation) still ends its trace."""
        try:
            pending = self._submit(request, streaming=streaming, descs=descs,
                                   trace=(trace.id, trace.context))
        except BaseException:
            trace.finish(0, 0, 0)
            raise
        trace.pending = pending
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
            pending.deliver(self._error(pending, ServerError(
                ErrorCode.CANCELLED, f"request for model '{self.name}' was cancelled")))

    def ask_to_cancel(self, pending: PendingRequest) -> None:
        """Cancel a request whose caller goes on reading its responses (a BLS stream's
        `ResponseIterator.cancel()`): a running one sees `is_cancelled()` and may go on
        sending until its final flag; a queued one ends with a CANCELLED error."""
        if pending.done:
            return
        if pending.instance is not None:
            pending.instance.cancel(pending.key)
        elif self.scheduler is not None and self.scheduler.remove(pending):
            pending.deliver(self._error(pending, ServerError(
                ErrorCode.CANCELLED, f"request for model '{self.name}' was cancelled")))

    def _submit(self, request: InferRequest, streaming: bool, descs: tuple | None = None,
                trace: tuple[int, str] | None = None,
                sink: Callable[[PendingRequest, InferResponse], None] | None = None
                ) -> PendingRequest:
        """Validate, place the inputs in shm, queue. `descs`: the inputs already are in
        shm (a BLS call's, in the caller's pool): they are passed on, not copied.
        `trace`: the request's trace id and context, for `request.trace()`. `sink`: where
        a unary request's response goes instead of its future (PendingRequest)."""
        if self._outage.error is not None:
            raise self._outage.error
        batch_size = self._validator.validate(request)
        output_shm = None
        if request.output_shm:
            output_shm = self._output_shm(request)
        staged = True
        input_ns = 0
        if descs is None:
            # A request an idle instance takes at once is copied now, as always; one that
            # will wait (or that /dev/shm cannot take now) is copied when dispatched.
            if self._stages and not self.scheduler.takes_now() \
                    and any([t.shm is None for t in request.inputs]):
                staged = False
            else:
                try:
                    copying = time.monotonic_ns()
                    descs, blocks = self._copy_inputs(request, batch_size)
                    input_ns = time.monotonic_ns() - copying
                except ShmExhausted:
                    if not self._stages:
                        raise
                    staged = False
            if not staged:
                descs, blocks = (), []  # _stage copies them, or takes their placed blocks
                for tensor in request.inputs:
                    if tensor.placed is not None:  # moved out of shm if it runs short
                        tensor.placed.park(tensor)
        else:
            descs = tuple((d[0], d[1], self._validator.model_shape(t, batch_size), *d[3:])
                          for d, t in zip(descs, request.inputs))
            # The parent's blocks among them (an ensemble's tensors, a BLS caller's own
            # inputs) stay alive while this request may read them: until its stub has
            # answered, even when the caller stopped waiting (cancelled) before that.
            hold = self._refs.hold
            blocks = [Block(d[3], d[4], d[5]) for d in descs if hold((d[3], d[4]))]
        key = next(_keys)
        params = json.dumps(request.parameters) if request.parameters else "{}"
        # None asked for means every output of the config (Triton's Normalize): the model
        # sees them as requested, and an output it returns that is not one is dropped.
        requested = tuple(request.requested_outputs or self._output_names)
        # The stub may answer with an input as it is when the parent owns its block (it
        # counts references, memory/block_refs.py) and the model answers once per request.
        lendable = not self.decoupled and bool(descs) and all(
            self._refs.is_held((d[3], d[4])) for d in descs)
        msg = p.request_msg(key=key, request_id=request.id,
                            correlation_id=request.correlation_id, flags=request.flags,
                            parameters_json=params, timeout_us=request.timeout_us,
                            requested=requested, inputs=descs, lendable=lendable,
                            output_shm=output_shm, trace=trace,
                            gpu_outputs=request.gpu_outputs)
        pending = PendingRequest(key, request, msg if staged else None, blocks, batch_size,
                                 self._free_blocks, streaming, sink)
        pending.input_ns = input_ns
        if not staged:
            pending.unstaged = msg
        # The request's client regions are held until it completes (memory/shared_memory.py).
        pending.on_complete, request._shm_release = request._shm_release, None
        self.stats.pending += 1
        assert self.scheduler is not None
        self.scheduler.submit(pending)
        if request.timeout_us > 0:
            asyncio.get_running_loop().call_later(request.timeout_us / 1e6, self._expire,
                                                  pending)
        return pending

    def _expire(self, pending: PendingRequest) -> None:
        """The request's own timeout passed: a running request is cancelled (the model
        decides). A queued one fails with Triton's "Request timeout expired", unless a
        batcher owns the queue: its queue policy (allow_timeout_override, DELAY) and its
        sequences decide what a timeout does there."""
        if pending.done or pending.cancelled:
            return
        if pending.instance is not None:
            pending.instance.cancel(pending.key)
        elif self.cfg.HasField("dynamic_batching") or self.cfg.HasField("sequence_batching"):
            return
        elif self.scheduler is not None and self.scheduler.remove(pending):
            pending.deliver(self._error(pending, ServerError(
                ErrorCode.UNAVAILABLE, "Request timeout expired")))

    def _output_shm(self, request: InferRequest) -> dict[str, tuple[str, int, int]]:
        """Where the stub writes outputs the client wants in its regions: name ->
        (window token, offset, byte_size)."""
        assert request.output_shm is not None
        if self.decoupled:
            name = next(iter(request.output_shm))
            raise ServerError(ErrorCode.INVALID_ARG, (
                f"output '{name}' for model '{self.name}': shared-memory outputs are not "
                f"supported for models using the decoupled transaction policy (each "
                f"response would overwrite the region)"))
        return {name: (ref.token, ref.offset, ref.byte_size)
                for name, ref in request.output_shm.items()}

    def _copy_inputs(self, request: InferRequest, batch_size: int
                     ) -> tuple[tuple, list[Block]]:
        """One copy of each input into the parent's pool; descriptors for the stub. An
        input in a client's region is not copied: the stub reads it there; nor is one a
        frontend gathered in the pool already (memory/input_placer.py): its block is
        taken over."""
        descs = []
        blocks = []
        taken = []
        try:
            for tensor in request.inputs:
                if tensor.shm is not None:
                    descs.append((tensor.name, tensor.datatype,
                                  self._validator.model_shape(tensor, batch_size),
                                  tensor.shm.token, tensor.shm.offset, tensor.shm.byte_size))
                    continue
                placed = tensor.placed
                if placed is not None and placed.take():
                    taken.append(placed)
                    block = placed.block  # gathered there by the frontend: no copy
                else:
                    block = self._refs.copy_in(tensor.data)
                    blocks.append(block)
                shape = self._validator.model_shape(tensor, batch_size)
                descs.append((tensor.name, tensor.datatype, shape, block.region,
                              block.offset, block.nbytes))
        except BaseException:
            self._free_blocks(blocks)
            for placed in taken:
                placed.give_back()  # still the frontend's: a later try takes it again
            raise
        blocks.extend(placed.block for placed in taken)
        return tuple(descs), blocks

    def _may_wait_ahead(self, pending: PendingRequest) -> bool:
        """Whether the request may wait in a busy stub's queue: not with more than
        AHEAD_MAX_BYTES of inputs still to copy into shm (they would hold it there)."""
        return pending.inputs is not None or \
            _input_bytes(pending.request) <= AHEAD_MAX_BYTES

    def _stage(self, pending: PendingRequest) -> bool:
        """Copy a request's inputs into the parent's pool as it goes to an instance (the
        default scheduler's requests wait for one with their inputs in process memory,
        so a queue never holds /dev/shm). False when it cannot go now: /dev/shm is full
        (it waits, and is tried again) or the request can never fit (it failed)."""
        msg = pending.unstaged
        assert msg is not None
        copying = time.monotonic_ns()
        try:
            descs, blocks = self._copy_inputs(pending.request, pending.batch_size)
        except ShmExhausted:
            return self._shm_short(pending)
        pending.input_ns = time.monotonic_ns() - copying
        lendable = not self.decoupled and bool(descs) and all(
            self._refs.is_held((d[3], d[4])) for d in descs)
        pending.inputs = p.with_inputs(msg, descs, lendable)
        pending.blocks.extend(blocks)
        pending.unstaged = None
        return True

    def _shm_short(self, pending: PendingRequest) -> bool:
        """/dev/shm could not take the request's inputs: it waits for memory the requests
        in flight give back, unless it is larger than /dev/shm or waited SHM_WAIT_S."""
        nbytes = _input_bytes(pending.request)
        capacity = shm_capacity()
        now = asyncio.get_running_loop().time()
        if capacity and nbytes > capacity:
            message = too_large_message(self.name, nbytes, capacity)
        elif not pending.shm_wait_since:
            pending.shm_wait_since = now
            return False
        elif now - pending.shm_wait_since < SHM_WAIT_S:
            return False
        else:
            message = waited_message(self.name, nbytes, SHM_WAIT_S)
        self._log.error("%s", message)
        pending.deliver(self._error(pending, ServerError(ErrorCode.RESOURCE_EXHAUSTED,
                                                         message)))
        return False

    def add_control_tensor(self, pending: PendingRequest, name: str, datatype: str,
                           shape: tuple[int, ...], data: bytes) -> tuple:
        """A tensor the scheduler adds to a request (sequence controls), in the parent's
        pool; its block is freed with the request's inputs. Its descriptor."""
        block = self._refs.copy_in(data)
        pending.blocks.append(block)
        return (name, datatype, shape, block.region, block.offset, block.nbytes)

    def _free_blocks(self, blocks: list[Block]) -> None:
        for block in blocks:
            self._refs.drop((block.region, block.offset))

    def _completed(self, pending: PendingRequest, response: InferResponse) -> None:
        """A request's final response: its statistics, then `on_request_done`."""
        stats = self.stats
        stats.pending -= 1
        now = time.monotonic_ns()
        arrival_ns = pending.arrival_ns
        took_us = (now - arrival_ns) // 1000
        stats.request_us += took_us
        stats.last_inference_ms = int(time.time() * 1000)
        # As Triton's Python backend: a request the model answered with an error response
        # (InferenceResponse(error=...)) succeeded; one whose execute raised failed.
        if response.error is None or pending.model_errors:
            stats.success += 1
            stats.success_us += took_us
            stats.inference_count += pending.batch_size or 1  # no batching: 1 each
            # As Triton, only successes add to the queue and compute figures.
            start_ns = pending.exec_start_ns
            if start_ns:
                stats.queue_us += (start_ns - arrival_ns) // 1000
                stats.compute_infer_us += (pending.compute_ns or now - start_ns) // 1000
            stats.compute_input_ns += pending.input_ns
            stats.compute_output_ns += pending.output_ns
        else:
            stats.failures[_failure_reason(pending, response.error)] += 1
            stats.failure_us += took_us
        if self._on_request_done is not None:
            self._on_request_done()

    def _error(self, pending: PendingRequest, error: ServerError) -> InferResponse:
        return InferResponse(self.name, self.version, pending.request.id, error=error)


def unary_on_decoupled(model_name: str, request_id: str) -> ServerError:
    """A request for one response to a decoupled model (or ensemble): refused."""
    return ServerError(ErrorCode.UNSUPPORTED, (
        f"[request id: {request_id or '<id_unknown>'}] model '{model_name}' is using the "
        f"decoupled transaction policy: use streaming (gRPC ModelStreamInfer or HTTP "
        f"generate_stream) to receive its responses"))


def _input_bytes(request: InferRequest) -> int:
    """The bytes of a request's inputs that go into the parent's pool."""
    return sum([memoryview(t.data).nbytes for t in request.inputs if t.shm is None])


def _failure_reason(pending: PendingRequest, error: ServerError) -> str:
    """Triton's reason label for a request that failed."""
    if pending.cancelled or error.code == ErrorCode.CANCELLED:
        return metrics.CANCELED
    if not pending.exec_start_ns:
        return metrics.REJECTED  # never reached execute
    return metrics.BACKEND


def _failed(response: InferResponse) -> InferResponse:
    """A stand-in that counts a stream with an error response not the model's as failed."""
    return InferResponse(response.model_name, response.model_version, response.id,
                         error=ServerError(ErrorCode.INTERNAL, "stream had an error"))
