"""Running one request through an ensemble (Triton's EnsembleScheduler).

A step runs as soon as every ensemble tensor it reads exists; steps that are ready
together run at once. Each step is an ordinary request to its model (its scheduler,
batcher and instances, as a client's request), built from descriptors: a tensor never
leaves shared memory between steps. The ensemble's inputs are copied once into the
parent's pool; a step's outputs stay in the block its stub wrote them to, viewed and
handed on to the steps that read them. Responses are held (`_Held`) until nothing
names their blocks any more.

A decoupled step's responses each start a lineage of their own: a copy of the tensors
known so far plus that response's outputs, in which the steps downstream of it run
again. Validation (validation.py) guarantees that a lineage's steps read nothing of
another lineage, and that all the ensemble's outputs come from one lineage: a lineage
that ends with every output known sends one response.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from pbserve.core.ensemble.steps import EnsembleGraph, Step
from pbserve.core.types import Buffer, InferRequest, InferResponse, ShmRef, TensorData
from pbserve.errors import ServerError


class StepModel(Protocol):
    """What a step needs of the model it calls (pbserve.core.model.Model)."""

    decoupled: bool

    def expect_request(self) -> None: ...

    async def infer(self, request: InferRequest, descs: tuple | None = None
                    ) -> InferResponse: ...

    def stream_infer(self, request: InferRequest, descs: tuple | None = None): ...


class StepError(Exception):
    """A step failed: `error` is what the ensemble's request fails with."""

    def __init__(self, error: ServerError) -> None:
        super().__init__(error.message)
        self.error = error


class _Held:
    """A step's response, kept until no tensor in use names its outputs."""

    __slots__ = ("response", "count")

    def __init__(self, response: InferResponse) -> None:
        self.response = response
        self.count = 1

    def drop(self) -> None:
        self.count -= 1
        if not self.count:
            self.response.release()


@dataclass(frozen=True)
class Value:
    """An ensemble tensor: its descriptor (name, datatype, shape, region, offset, nbytes),
    its bytes, the client region it lives in (if any), and the response holding it."""

    desc: tuple
    data: Buffer
    shm: ShmRef | None
    held: _Held | None


class EnsembleRun:
    """One request's pass through the graph. `emit` gets each response the ensemble
    sends (one unless a step is decoupled); `run` returns once every step is done and
    raises StepError for a step that failed."""

    def __init__(self, name: str, version: str, graph: EnsembleGraph,
                 find_model: Callable[[str, str], StepModel], request: InferRequest,
                 outputs: list[str], emit: Callable[[InferResponse], None],
                 unneeded: frozenset[int] = frozenset(), trace: Any = None) -> None:
        """`unneeded`: steps that make none of `outputs` (they do not run); `trace`: the
        request's trace (each step's is its child)."""
        self._name = name
        self._version = version
        self._graph = graph
        self._find_model = find_model
        self._request = request
        self._outputs = outputs
        self._emit = emit
        self._unneeded = unneeded
        self._trace = trace
        # ensemble output -> the client region the step writing it writes it into
        self._output_shm = request.output_shm or {}
        self.step_ns = 0  # the steps' time, from their submission to their last response

    async def run(self, inputs: dict[str, Value]) -> None:
        await self._flow(inputs, set(self._unneeded))

    async def _flow(self, env: dict[str, Value], done: set[int]) -> None:
        """Run every step of this lineage that can run (`done`: steps it must not run),
        then send the response if the lineage made every output."""
        created: list[_Held] = []
        running: dict[asyncio.Task, Step] = {}
        try:
            while True:
                ready = [s for s in self._graph.steps
                         if s.index not in done and all(t in env for _, t in s.inputs)]
                done.update(s.index for s in ready)
                if len(ready) == 1 and not running:  # a chain: no task needed
                    await self._step(ready[0], env, created)
                    continue
                for step in ready:
                    task = asyncio.ensure_future(self._step(step, env, created))
                    running[task] = step
                if not running:
                    break
                finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    del running[task]
                    task.result()
            if all(name in env for name in self._outputs):
                self._send(env)
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            for held in created:
                held.drop()

    async def _step(self, step: Step, env: dict[str, Value], created: list[_Held]) -> None:
        model = self._model(step)
        request, descs = self._step_request(step, env)
        self._announce_successors(step)
        start = time.monotonic_ns()
        if not model.decoupled:
            try:
                response = await model.infer(request, descs=descs)
            except ServerError as err:
                raise StepError(self._step_error(step, err)) from None
            self.step_ns += time.monotonic_ns() - start
            if response.error is not None:
                response.release()
                raise StepError(self._model_error(response.error))
            self._add_outputs(step, response, env, created)
            return
        lineages: list[asyncio.Task] = []
        skip = ({s.index for s in self._graph.steps} - self._graph.downstream[step.index]) \
            | self._unneeded
        try:
            try:
                async with contextlib.aclosing(model.stream_infer(request, descs=descs)) \
                        as stream:
                    async for response in stream:
                        if response.error is not None:
                            response.release()
                            raise StepError(self._model_error(response.error))
                        if not response.outputs:
                            response.release()
                            continue
                        lineage: dict[str, Value] = dict(env)
                        mine: list[_Held] = []
                        self._add_outputs(step, response, lineage, mine)
                        lineages.append(asyncio.ensure_future(
                            self._lineage(lineage, set(skip), mine)))
            except ServerError as err:
                raise StepError(self._step_error(step, err)) from None
            self.step_ns += time.monotonic_ns() - start
            for task in asyncio.as_completed(lineages):
                await task
        finally:
            for task in lineages:
                task.cancel()
            if lineages:
                await asyncio.gather(*lineages, return_exceptions=True)

    async def _lineage(self, env: dict[str, Value], done: set[int], held: list[_Held]
                       ) -> None:
        try:
            await self._flow(env, done)
        finally:
            for h in held:
                h.drop()

    def _announce_successors(self, step: Step) -> None:
        """The models of the steps that will read this one's outputs may get ready now
        (Model.expect_request: a stub polls instead of sleeping, when there is CPU to
        spare), so that the next step's request wakes nobody."""
        for successor in self._graph.successors[step.index]:
            if successor.index in self._unneeded:
                continue
            try:
                self._find_model(successor.model_name, successor.version).expect_request()
            except ServerError:
                pass  # the step reports it when it runs

    def _model(self, step: Step) -> StepModel:
        try:
            return self._find_model(step.model_name, step.version)
        except ServerError as err:
            raise StepError(self._step_error(step, err)) from None

    def _model_error(self, error: ServerError) -> ServerError:
        """An error a step's model answered with, in Triton's words."""
        return ServerError(error.code, f"in ensemble '{self._name}', {error.message}")

    def _step_error(self, step: Step, err: ServerError) -> ServerError:
        """An error before the step's model ran (its validation, its model gone): say
        which step, model and tensors, which Triton only logs."""
        reads = ", ".join(f"'{t}' as '{i}'" for i, t in step.inputs)
        return ServerError(err.code, (
            f"in ensemble '{self._name}', step {step.index} (model '{step.model_name}', "
            f"reading {reads}): {err.message}"))

    def _step_request(self, step: Step, env: dict[str, Value]) -> tuple[InferRequest, tuple]:
        inputs = []
        descs = []
        for model_input, tensor in step.inputs:
            value = env[tensor]
            desc = value.desc
            inputs.append(TensorData(model_input, desc[1], desc[2], value.data, value.shm))
            descs.append((model_input, *desc[1:]))
        request = self._request
        output_shm = {o: self._output_shm[t] for o, t in step.outputs
                      if t in self._output_shm} or None
        return InferRequest(
            step.model_name, step.version, request.id, inputs=inputs,
            requested_outputs=step.requested, parameters=request.parameters,
            correlation_id=request.correlation_id, flags=request.flags,
            priority=request.priority, timeout_us=request.timeout_us,
            output_shm=output_shm, _trace_parent=self._trace), tuple(descs)

    @staticmethod
    def _add_outputs(step: Step, response: InferResponse, env: dict[str, Value],
                     created: list[_Held]) -> None:
        held = _Held(response)
        created.append(held)
        descs = {d[0]: d for d in response._descs}
        outputs = {t.name: t for t in response.outputs}
        for model_output, tensor in step.outputs:
            out = outputs.get(model_output)
            if out is None:
                continue
            ref = out.shm  # written into a client's region: its descriptor names that
            if ref is not None:
                desc = (out.name, out.datatype, out.shape, ref.token, ref.offset,
                        ref.byte_size)
            else:  # no descriptor: not in shm (a frontend's answer from the core, in
                # its message), copied for the next step (frontends/direct.py `lent`)
                desc = descs.get(out.name) or \
                    (out.name, out.datatype, out.shape, "", 0, memoryview(out.data).nbytes)
            env[tensor] = Value(desc, out.data, ref, held)

    def _send(self, env: dict[str, Value]) -> None:
        """A response with the outputs the client asked for; it holds their blocks."""
        outputs = []
        descs = []
        holders = []
        for name in self._outputs:
            value = env[name]
            desc = value.desc
            outputs.append(TensorData(name, desc[1], tuple(desc[2]), value.data, value.shm))
            if value.shm is None:
                descs.append((name, *desc[1:]))
            if value.held is not None and value.held not in holders:
                value.held.count += 1
                holders.append(value.held)

        def release() -> None:
            for held in holders:
                held.drop()

        self._emit(InferResponse(self._name, self._version, self._request.id, outputs=outputs,
                                 final=False, _release=release, _descs=tuple(descs)))
