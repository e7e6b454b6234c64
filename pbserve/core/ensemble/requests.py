"""An ensemble's requests, in whichever process runs them: the core (model.py), or a
frontend process that runs the graph itself (pbserve/frontends/ensembles.py).

A request is validated against the ensemble's config, its inputs put in shared memory
once (`InputStore`), the graph run (scheduler.py `EnsembleRun`), and its outcome counted
(`EnsembleCounts`): the two processes differ in those two seams only.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Callable, Protocol

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.ensemble.scheduler import EnsembleRun, StepError, StepModel, Value
from pbserve.core.ensemble.steps import EnsembleGraph
from pbserve.core.model import unary_on_decoupled
from pbserve.core.observability import metrics
from pbserve.core.types import Buffer, InferRequest, InferResponse, TensorData
from pbserve.core.validation import RequestValidator
from pbserve.errors import ErrorCode, ServerError
from shm import Block

FindModel = Callable[[str, str], StepModel]
SampleTrace = Callable[[InferRequest], Any]  # the request's trace, or None


class InputStore(Protocol):
    """Where an ensemble's inputs are copied once, for every step's stub to read."""

    def store(self, tensor: TensorData) -> Block: ...

    def view(self, block: Block) -> Buffer: ...

    def free(self, block: Block) -> None: ...


class EnsembleCounts(Protocol):
    """What an ensemble's requests add to its statistics."""

    def started(self) -> None:
        """A request entered the graph (Triton's pending count)."""

    def ended(self) -> None:
        """It left the graph, however it ended."""

    def ran(self, batch: int, took_ns: int, step_ns: int, failed: bool) -> None:
        """It ran: as Triton counts an ensemble, one execution, its compute the steps'
        (`step_ns`: each step's time from submission to answer, queue included);
        `failed`: a step failed."""

    def aborted(self, reason: str) -> None:
        """It was cancelled (metrics.CANCELED), or something not a step's failed
        (metrics.OTHER: no room in /dev/shm for its inputs, ...)."""


class EnsembleRequests:
    """Runs requests through one loaded ensemble's graph."""

    def __init__(self, name: str, version: str, cfg: mc.ModelConfig, graph: EnsembleGraph,
                 find_model: FindModel, inputs: InputStore, counts: EnsembleCounts,
                 sample_trace: SampleTrace | None = None) -> None:
        self.name = name
        self.version = version
        self._cfg = cfg
        self.validator = RequestValidator(cfg)
        self.output_names = [o.name for o in cfg.output]
        self._graph = graph
        self._find_model = find_model
        self._inputs = inputs
        self._counts = counts
        self._sample_trace = sample_trace
        self._unneeded: dict[tuple[str, ...], frozenset[int]] = {}  # by outputs asked for
        self.runs: set[asyncio.Task] = set()  # the requests in the graph now

    @property
    def first_steps(self) -> tuple[tuple[str, str], ...]:
        """The (model, version) of the steps that read only the ensemble's inputs."""
        return tuple((s.model_name, s.version) for s in self._graph.first)

    @property
    def decoupled(self) -> bool:
        """As the config says after loading (a decoupled step makes it so)."""
        return self._cfg.model_transaction_policy.decoupled

    async def infer(self, request: InferRequest, descs: tuple | None = None
                    ) -> InferResponse:
        if self.decoupled:
            raise unary_on_decoupled(self.name, request.id)
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
        error that ended it). `on_submit` gets the run's task (cancelling it cancels
        the steps in flight)."""
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

    async def _run(self, request: InferRequest, descs: tuple | None,
                   emit: Callable[[InferResponse], None]) -> ServerError | None:
        """Validate, put the inputs in shm, run the graph; the error that ended the
        request (None: it succeeded)."""
        batch = self.validator.validate(request)
        arrival = time.monotonic_ns()
        sample = self._sample_trace
        trace = sample(request) if sample is not None else None
        counts = self._counts
        counts.started()
        blocks: list[Block] = []
        error: ServerError | None = None
        run: EnsembleRun | None = None
        task = asyncio.current_task()
        if task is not None:
            self.runs.add(task)
        try:
            inputs = self._values(request, descs, blocks)
            outputs = list(request.requested_outputs or self.output_names)
            run = EnsembleRun(self.name, self.version, self._graph, self._find_model,
                              request, outputs, emit, self._unneeded_for(outputs), trace)
            await run.run(inputs)
        except StepError as err:
            error = err.error
        except asyncio.CancelledError:
            counts.aborted(metrics.CANCELED)
            raise
        except BaseException:  # not the steps' error (/dev/shm full for the inputs, ...)
            counts.aborted(metrics.OTHER)
            raise
        finally:
            counts.ended()
            for block in blocks:
                self._inputs.free(block)
            if task is not None:
                self.runs.discard(task)
            if trace is not None:  # no compute stamps: an ensemble executes nothing itself
                trace.finish(arrival, 0, 0)
        assert run is not None
        counts.ran(max(batch, 1), time.monotonic_ns() - arrival, run.step_ns,
                   error is not None)
        return error

    def _unneeded_for(self, outputs: list[str]) -> frozenset[int]:
        key = tuple(sorted(outputs))
        unneeded = self._unneeded.get(key)
        if unneeded is None:
            if len(self._unneeded) >= 64:  # bounded: clients choose the subsets
                self._unneeded.clear()
            unneeded = self._unneeded[key] = self._graph.unneeded(outputs)
        return unneeded

    def _values(self, request: InferRequest, descs: tuple | None, blocks: list[Block]
                ) -> dict[str, Value]:
        """The ensemble's inputs as ensemble tensors: copied once into shm, or named
        where they are (a client's region, a BLS caller's or a frontend's blocks)."""
        values = {}
        for index, tensor in enumerate(request.inputs):
            if descs is not None:
                desc = descs[index]
            elif tensor.shm is not None:
                ref = tensor.shm
                desc = (tensor.name, tensor.datatype, tuple(tensor.shape), ref.token,
                        ref.offset, ref.byte_size)
            else:
                block = self._inputs.store(tensor)
                blocks.append(block)
                desc = (tensor.name, tensor.datatype, tuple(tensor.shape), block.region,
                        block.offset, block.nbytes)
                values[tensor.name] = Value(desc, self._inputs.view(block), None, None)
                continue
            values[tensor.name] = Value(desc, tensor.data, tensor.shm, None)
        return values

    def _error(self, request: InferRequest, error: ServerError) -> InferResponse:
        return InferResponse(self.name, self.version, request.id, error=error)
