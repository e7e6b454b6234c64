"""An ensemble's steps as the scheduler walks them: what each step reads and writes,
and which steps descend from each one (a decoupled step's responses each run those
again, on their own)."""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc


@dataclass(frozen=True)
class Step:
    """One step: `inputs` and `outputs` pair the model's tensor name with the ensemble
    tensor's, in the config's order; `version` "" is the model's latest."""

    index: int
    model_name: str
    version: str
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]

    @property
    def requested(self) -> list[str]:
        return [model_name for model_name, _ in self.outputs]


@dataclass(frozen=True)
class EnsembleGraph:
    steps: tuple[Step, ...]
    # step index -> the steps that read, directly or not, what it writes
    downstream: dict[int, frozenset[int]]
    # the steps reading only ensemble inputs: the first to run
    first: tuple[Step, ...]
    # step index -> the steps reading what it writes (directly), of other models
    successors: dict[int, tuple[Step, ...]]

    @property
    def model_names(self) -> list[str]:
        return list(dict.fromkeys(s.model_name for s in self.steps))

    def unneeded(self, outputs: list[str]) -> frozenset[int]:
        """The steps nothing of `outputs` depends on: Triton does not run them."""
        writer = {t: s.index for s in self.steps for _, t in s.outputs}
        needed: set[int] = set()
        todo = [writer[o] for o in outputs if o in writer]
        while todo:
            index = todo.pop()
            if index not in needed:
                needed.add(index)
                todo.extend(writer[t] for _, t in self.steps[index].inputs if t in writer)
        return frozenset(s.index for s in self.steps) - needed


def ensemble_graph(cfg: mc.ModelConfig) -> EnsembleGraph:
    """The graph of a config that passed config_checks.validate_ensemble_scheduling."""
    steps = tuple(
        Step(index, s.model_name, str(s.model_version) if s.model_version >= 0 else "",
             tuple(s.input_map.items()), tuple(s.output_map.items()))
        for index, s in enumerate(cfg.ensemble_scheduling.step))
    readers: dict[str, list[int]] = {}
    for step in steps:
        for _, tensor in step.inputs:
            readers.setdefault(tensor, []).append(step.index)
    downstream: dict[int, frozenset[int]] = {}
    for step in steps:
        seen: set[int] = set()
        todo = [r for _, t in step.outputs for r in readers.get(t, ())]
        while todo:
            index = todo.pop()
            if index not in seen:
                seen.add(index)
                todo.extend(r for _, t in steps[index].outputs for r in readers.get(t, ()))
        downstream[step.index] = frozenset(seen)
    inputs = {io.name for io in cfg.input}
    first = tuple(s for s in steps if all(t in inputs for _, t in s.inputs))
    successors = {
        step.index: tuple(steps[i] for i in sorted({r for _, t in step.outputs
                                                    for r in readers.get(t, ())})
                          if steps[i].model_name != step.model_name)
        for step in steps}
    return EnsembleGraph(steps, downstream, first, successors)
