"""One loaded version of an ensemble: what the manager serves for `platform: "ensemble"`.

It offers what the frontends, the statistics and BLS use of a `Model` (infer,
stream_infer, readiness, statistics, the loaded config) and has no instances: each
request runs through the graph (scheduler.py), and every step is a request to a
composing model, found by name when the step runs (a composing model reloaded in the
meantime serves the next request).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.cache.cached_infer import infer_cached, new_load
from pbserve.core.cache.store import ResponseStore
from pbserve.core.ensemble.remote_step import RemoteStep
from pbserve.core.ensemble.requests import EnsembleRequests
from pbserve.core.ensemble.scheduler import StepModel
from pbserve.core.ensemble.steps import ensemble_graph
from pbserve.core.ensemble.validation import validate_ensemble
from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.observability import metrics
from pbserve.core.observability.metrics import ModelStats
from pbserve.core.observability.tracing import TRACER
from pbserve.core.types import InferRequest, InferResponse, TensorData
from pbserve.errors import ServerError, invalid_arg
from shm import Block

log = logging.getLogger("pbserve.core")
FindModel = Callable[[str, str], StepModel]


class EnsembleModel:
    instances: tuple = ()  # an ensemble runs in no stub of its own

    def __init__(self, name: str, version: int, model_dir: Path, cfg: mc.ModelConfig,
                 find_model: FindModel, refs: BlockRefs,
                 cache: ResponseStore | None = None) -> None:
        """`find_model(name, version)`: a loaded composing model (NOT_FOUND if none);
        `refs`: the parent's pool, which the ensemble's inputs are copied into once;
        `cache`: the server's response cache, used when the config enables it."""
        self.name = name
        self.version = str(version)
        self.model_dir = model_dir
        self.cfg = cfg
        self.decoupled = False
        self.stats = ModelStats(name, self.version)
        self.graph = ensemble_graph(cfg)
        self._find_model = find_model
        self._counts = _StatsCounts(self.stats)
        self.requests = EnsembleRequests(
            name, self.version, cfg, self.graph, find_model, _ParentInputs(refs),
            self._counts, self._sample_trace)
        # Triton caches an ensemble's responses at its top level (not per step)
        self._cache = cache if cfg.response_cache.enable else None
        self._cache_load = new_load()  # this load's entries only (cached_infer.py)
        # its nv_cache_*_per_model metrics, as Triton 2.51 shows an ensemble's
        self.stats.cache_enabled = self._cache is not None

    # -- lifecycle --------------------------------------------------------------------
    async def load(self, auto_complete: bool = True) -> None:
        """Check the steps against the composing models' loaded configs (Triton's
        ValidateEnsembleConfig); a decoupled step on the way makes the ensemble
        decoupled, as Triton writes into its config."""
        configs = {}
        for step in self.graph.steps:
            try:
                configs[step.model_name] = self._find_model(step.model_name, step.version).cfg
            except ServerError:
                if step.version:
                    raise invalid_arg(
                        f"ensemble '{self.name}' depends on '{step.model_name}' whose "
                        f"required version {step.version} is not loaded.") from None
                raise invalid_arg(f"ensemble '{self.name}' depends on '{step.model_name}' "
                                  "which has no loaded version.") from None
        self.decoupled = validate_ensemble(self.cfg, configs)
        self.cfg.model_transaction_policy.decoupled = self.decoupled

    async def unload(self) -> None:
        """Requests running through the graph finish first (their steps are requests to
        models that are still loaded), for 30 s at most; then they are cancelled."""
        runs = self.requests.runs
        if runs:
            await asyncio.wait(list(runs), timeout=30.0)
        for task in list(runs):
            task.cancel()

    def retire(self) -> None:
        """Nothing to restart: an ensemble has no stubs."""

    def end_requests(self, error: ServerError) -> int:
        """Shutdown's time is up: the steps' models end the requests in flight."""
        return 0

    async def not_ready_reason(self) -> str | None:
        """Ready when every composing model is (Triton's readiness of an ensemble)."""
        for name, version in dict.fromkeys((s.model_name, s.version) for s in self.graph.steps):
            try:
                model = self._find_model(name, version)
            except ServerError as err:
                return f"composing model '{name}' is not available: {err.message}"
            reason = await model.not_ready_reason()
            if reason is not None:
                return f"composing model '{name}' is not ready: {reason}"
        return None

    def expect_request(self) -> None:
        """A request is coming: the first steps' models may get ready for it."""
        for step in self.graph.first:
            try:
                self._find_model(step.model_name, step.version).expect_request()
            except ServerError:
                pass

    def _sample_trace(self, request: InferRequest) -> Any:
        return TRACER.sample(self.name, self.version, request.id, request.trace_headers) \
            if TRACER.enabled else None

    def direct_route(self, slot: int) -> tuple | None:
        """What a frontend process needs to run this ensemble's requests itself
        (pbserve/frontends/ensembles.py): its version and config (serialized), and None
        where the stubs' queues of a Model's route are. None where its requests must
        pass through the core: the response cache, tracing, a step that another
        process of the request plane serves."""
        if self._cache is not None or TRACER.enabled:
            return None
        for step in self.graph.steps:
            try:
                if isinstance(self._find_model(step.model_name, step.version), RemoteStep):
                    return None
            except ServerError:
                return None
        return self.version, self.cfg.SerializeToString(), None, False, False

    def step_model(self, name: str, version: str = "") -> StepModel:
        """The loaded model a step named `name` calls now (NOT_FOUND if none)."""
        return self._find_model(name, version)

    # -- requests ---------------------------------------------------------------------
    async def infer(self, request: InferRequest, descs: tuple | None = None) -> InferResponse:
        requests = self.requests
        if self._cache is not None and descs is None and not request.uses_shm \
                and not self.decoupled:
            requests.validator.validate(request)
            requested = tuple(request.requested_outputs or requests.output_names)
            return await infer_cached(self._cache, self.stats, self.name, self.version,
                                      request, requested, lambda: requests.infer(request),
                                      self._cache_load)
        return await requests.infer(request, descs)

    def stream_infer(self, request: InferRequest, descs: tuple | None = None,
                     on_submit: Callable[[asyncio.Task], None] | None = None
                     ) -> AsyncIterator[InferResponse]:
        """EnsembleRequests.stream_infer."""
        return self.requests.stream_infer(request, descs, on_submit)

    def ask_to_cancel(self, run: asyncio.Task) -> None:
        """A BLS caller cancelled its stream: the steps in flight are cancelled."""
        run.cancel()

    def add_direct_stats(self, size: int, requests: int, failures: int, success_ns: int,
                         failure_ns: int, compute_ns: int, cancelled: int = 0) -> None:
        """What requests a frontend process ran through the graph itself added to the
        statistics (pbserve/frontends/ensembles.py), added up by batch size."""
        self._counts.add(size, requests, failures, success_ns, failure_ns, compute_ns)
        if cancelled:
            self.stats.failures[metrics.CANCELED] += cancelled


class _ParentInputs:
    """The ensemble's inputs in the parent's pool (EnsembleRequests' InputStore)."""

    def __init__(self, refs: BlockRefs) -> None:
        self._refs = refs

    def store(self, tensor: TensorData) -> Block:
        return self._refs.copy_in(tensor.data)

    def view(self, block: Block) -> memoryview:
        return self._refs.view(block)

    def free(self, block: Block) -> None:
        self._refs.drop((block.region, block.offset))


class _StatsCounts:
    """The ensemble's ModelStats (EnsembleRequests' EnsembleCounts): as Triton counts an
    ensemble, a success adds one execution, its compute the steps'."""

    def __init__(self, stats: ModelStats) -> None:
        self._stats = stats

    def started(self) -> None:
        self._stats.pending += 1

    def ended(self) -> None:
        self._stats.pending -= 1

    def ran(self, batch: int, took_ns: int, step_ns: int, failed: bool) -> None:
        if failed:
            self.add(batch, 1, 1, 0, took_ns, 0)
        else:
            self.add(batch, 1, 0, took_ns, 0, step_ns)

    def add(self, size: int, requests: int, failures: int, success_ns: int,
            failure_ns: int, compute_ns: int) -> None:
        """`requests` of batch size `size` ran, `failures` of them failed (a step did);
        their times from arrival to answer, and the successes' steps' time."""
        stats = self._stats
        stats.request_us += (success_ns + failure_ns) // 1000
        stats.last_inference_ms = int(time.time() * 1000)
        if failures:
            stats.failures[metrics.BACKEND] += failures
            stats.failure_us += failure_ns // 1000
        succeeded = requests - failures
        if succeeded:
            stats.success += succeeded
            stats.success_us += success_ns // 1000
            stats.inference_count += succeeded * size
            stats.exec_count += succeeded
            stats.compute_infer_us += compute_ns // 1000
            figures = stats.batches.setdefault(size, [0, 0, 0, 0])
            figures[0] += succeeded
            figures[1] += compute_ns

    def aborted(self, reason: str) -> None:
        self._stats.failures[reason] += 1
