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
from typing import AsyncIterator, Callable

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.cache.cached_infer import infer_cached, new_load
from pbserve.core.cache.store import ResponseStore
from pbserve.core.ensemble.scheduler import EnsembleRun, StepError, StepModel, Value
from pbserve.core.ensemble.steps import ensemble_graph
from pbserve.core.ensemble.validation import validate_ensemble
from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.model import unary_on_decoupled
from pbserve.core.observability import metrics
from pbserve.core.observability.metrics import ModelStats
from pbserve.core.observability.tracing import TRACER
from pbserve.core.validation import RequestValidator
from pbserve.core.types import InferRequest, InferResponse
from pbserve.errors import ErrorCode, ServerError, invalid_arg

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
        self._refs = refs
        self._validator = RequestValidator(cfg)
        self._output_names = [o.name for o in cfg.output]
        self._runs: set[asyncio.Task] = set()
        self._unneeded: dict[tuple[str, ...], frozenset[int]] = {}  # by outputs asked for
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
        if self._runs:
            await asyncio.wait(list(self._runs), timeout=30.0)
        for task in list(self._runs):
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

    def step_model(self, name: str, version: str = "") -> StepModel:
        """The loaded model a step named `name` calls now (NOT_FOUND if none)."""
        return self._find_model(name, version)

    # -- requests ---------------------------------------------------------------------
    async def infer(self, request: InferRequest, descs: tuple | None = None) -> InferResponse:
        if self.decoupled:
            raise unary_on_decoupled(self.name, request.id)
        if self._cache is not None and descs is None and not request.uses_shm:
            self._validator.validate(request)
            requested = tuple(request.requested_outputs or self._output_names)
            return await infer_cached(self._cache, self.stats, self.name, self.version,
                                      request, requested, lambda: self._infer(request, None),
                                      self._cache_load)
        return await self._infer(request, descs)

    async def _infer(self, request: InferRequest, descs: tuple | None) -> InferResponse:
        responses: list[InferResponse] = []
        error = await self._run(request, descs, responses.append)
        if error is not None:
            for response in responses:
                response.release()
            return self._error(request, error)
        if not responses:  # validation guarantees one: never reached but said clearly
            return self._error(request, ServerError(
                ErrorCode.INTERNAL, f"ensemble '{self.name}' produced no response"))
        response = responses[0]
        response.final = True
        return response

    async def stream_infer(self, request: InferRequest, descs: tuple | None = None,
                           on_submit: Callable[[asyncio.Task], None] | None = None
                           ) -> AsyncIterator[InferResponse]:
        """Every response the graph sends, then a final one with no outputs (or the
        error that ended it). `on_submit` gets what `ask_to_cancel` takes."""
        queue: asyncio.Queue[InferResponse | None] = asyncio.Queue()
        run = asyncio.ensure_future(self._stream(request, descs, queue))
        if on_submit is not None:
            on_submit(run)
        try:
            while True:
                response = await queue.get()
                if response is None:
                    break
                yield response
                if response.final:
                    break
        finally:
            if not run.done():
                run.cancel()
            while not queue.empty():
                leftover = queue.get_nowait()
                if leftover is not None:
                    leftover.release()

    async def _stream(self, request: InferRequest, descs: tuple | None,
                      queue: asyncio.Queue) -> None:
        try:
            error = await self._run(request, descs, queue.put_nowait)
        except asyncio.CancelledError:
            queue.put_nowait(None)
            raise
        if error is not None:
            queue.put_nowait(self._error(request, error))
        else:
            queue.put_nowait(InferResponse(self.name, self.version, request.id, final=True))

    def ask_to_cancel(self, run: asyncio.Task) -> None:
        """A BLS caller cancelled its stream: the steps in flight are cancelled."""
        run.cancel()

    async def _run(self, request: InferRequest, descs: tuple | None,
                   emit: Callable[[InferResponse], None]) -> ServerError | None:
        """Validate, put the inputs in shm, run the graph; the error that ended the
        request (None: it succeeded). Counts the ensemble's statistics."""
        batch = self._validator.validate(request)
        arrival = time.monotonic_ns()
        trace = TRACER.sample(self.name, self.version, request.id, request.trace_headers) \
            if TRACER.enabled else None
        stats = self.stats
        stats.pending += 1
        blocks: list = []
        error: ServerError | None = None
        run: EnsembleRun | None = None
        task = asyncio.current_task()
        if task is not None:
            self._runs.add(task)
        try:
            inputs = self._inputs(request, descs, blocks)
            outputs = list(request.requested_outputs or self._output_names)
            key = tuple(sorted(outputs))
            unneeded = self._unneeded.get(key)
            if unneeded is None:
                if len(self._unneeded) >= 64:  # bounded: clients choose the subsets
                    self._unneeded.clear()
                unneeded = self._unneeded[key] = self.graph.unneeded(outputs)
            run = EnsembleRun(self.name, self.version, self.graph, self._find_model,
                              request, outputs, emit, unneeded, trace)
            await run.run(inputs)
        except StepError as err:
            error = err.error
        except asyncio.CancelledError:
            stats.failures[metrics.CANCELED] += 1
            raise
        except BaseException:  # not the steps' error (/dev/shm full for the inputs, ...)
            stats.failures[metrics.OTHER] += 1
            raise
        finally:
            stats.pending -= 1
            for block in blocks:
                self._refs.drop((block.region, block.offset))
            if task is not None:
                self._runs.discard(task)
            if trace is not None:  # no compute stamps: an ensemble executes nothing itself
                trace.finish(arrival, 0, 0)
        took_us = (time.monotonic_ns() - arrival) // 1000
        stats.request_us += took_us
        stats.last_inference_ms = int(time.time() * 1000)
        if error is None:
            # As Triton counts an ensemble: one execution per request, its compute the
            # steps' (here: each step's time from submission to answer, queue included).
            assert run is not None
            stats.success += 1
            stats.success_us += took_us
            stats.inference_count += max(batch, 1)
            stats.exec_count += 1
            stats.compute_infer_us += run.step_ns // 1000
            figures = stats.batches.setdefault(max(batch, 1), [0, 0, 0, 0])
            figures[0] += 1
            figures[1] += run.step_ns
        else:
            stats.failures[metrics.BACKEND] += 1
            stats.failure_us += took_us
        return error

    def _inputs(self, request: InferRequest, descs: tuple | None, blocks: list
                ) -> dict[str, Value]:
        """The ensemble's inputs as ensemble tensors: copied once into the parent's pool,
        or named where they are (a client's region, a BLS caller's blocks)."""
        values = {}
        for index, tensor in enumerate(request.inputs):
            if descs is not None:
                desc = descs[index]
            elif tensor.shm is not None:
                ref = tensor.shm
                desc = (tensor.name, tensor.datatype, tuple(tensor.shape), ref.token,
                        ref.offset, ref.byte_size)
            else:
                block = self._refs.copy_in(tensor.data)
                blocks.append(block)
                desc = (tensor.name, tensor.datatype, tuple(tensor.shape), block.region,
                        block.offset, block.nbytes)
                values[tensor.name] = Value(desc, self._refs.view(block), None, None)
                continue
            values[tensor.name] = Value(desc, tensor.data, tensor.shm, None)
        return values

    def _error(self, request: InferRequest, error: ServerError) -> InferResponse:
        return InferResponse(self.name, self.version, request.id, error=error)
