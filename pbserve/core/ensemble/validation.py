"""Triton's ValidateEnsembleConfig (core src/ensemble_utils.cc): an ensemble checked
against the completed configs of the models it composes, once they are loaded.

The structural checks that need no other model (every output written, no tensor
unused) ran earlier, with the config's own (config_checks.validate_ensemble_scheduling).
Every message is Triton's wording, all INVALID_ARG.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.errors import invalid_arg

WILDCARD_DIM = -1


@dataclass
class _Tensor:
    """One ensemble tensor: its type and shape as the model that names it first sees
    it, and the decoupled step it descends from (`label`, 0: none)."""

    model: str
    data_type: int
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]
    label: int = 0
    visited: bool = False


def _tensor(model: str, batching: bool, io: mc.ModelInput | mc.ModelOutput) -> _Tensor:
    dims = tuple(io.reshape.shape) if io.HasField("reshape") else tuple(io.dims)
    return _Tensor(model, io.data_type, dims, ((WILDCARD_DIM,) if batching else ()) + dims)


def _dims_agree(a: Sequence[int], b: Sequence[int]) -> bool:
    return len(a) == len(b) and all(
        x == y or WILDCARD_DIM in (x, y) for x, y in zip(a, b))


def _dims_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _check_consistent(known: _Tensor, other: _Tensor, prefix: str) -> None:
    if known.data_type != other.data_type:
        raise invalid_arg(
            f"{prefix}inconsistent data type: {mc.DataType.Name(known.data_type)} is inferred "
            f"from model {known.model} while {mc.DataType.Name(other.data_type)} is inferred "
            f"from model {other.model}")
    # A batching and a non-batching model may share a tensor when the non-batching
    # one's dims are the batching one's with the batch dimension in front.
    if not _dims_agree(known.dims, other.dims) and \
            not _dims_agree(known.full_dims, other.full_dims):
        raise invalid_arg(
            f"{prefix}inconsistent shape: {_dims_text(known.full_dims)} is inferred from "
            f"model {known.model} while {_dims_text(other.full_dims)} is inferred from "
            f"model {other.model}")


def validate_ensemble(cfg: mc.ModelConfig, step_configs: Mapping[str, mc.ModelConfig]
                      ) -> bool:
    """Check `cfg`'s steps against `step_configs` (composing model name -> its completed
    config). Returns whether the ensemble is decoupled (some step on the way to its
    outputs is), which Triton writes into the ensemble's config."""
    name = cfg.name
    batching = cfg.max_batch_size > 0
    tensors: dict[str, _Tensor] = {io.name: _tensor(name, batching, io) for io in cfg.input}
    for io in cfg.output:
        tensors.setdefault(io.name, _tensor(name, batching, io))
    steps = cfg.ensemble_scheduling.step
    for step in steps:
        model_cfg = step_configs[step.model_name]
        if model_cfg.max_batch_size != 0 and model_cfg.max_batch_size < cfg.max_batch_size:
            raise invalid_arg(
                f"ensemble {name} allows maximum batch size {cfg.max_batch_size}, but it "
                f"contains model {step.model_name} which only allows maximum batch size to "
                f"be {model_cfg.max_batch_size}")
        _check_mapping(name, step, model_cfg, tensors)
    decoupled = {i for i, s in enumerate(steps)
                 if step_configs[s.model_name].model_transaction_policy.decoupled}
    return _decoupled_flow(cfg, tensors, decoupled)


def _check_mapping(ensemble: str, step: mc.ModelEnsembling.Step,
                   model_cfg: mc.ModelConfig, tensors: dict[str, _Tensor]) -> None:
    """ValidateTensorMapping: each input mapped once, each map naming a real tensor of
    the model, types and shapes agreeing with what other steps say of the tensor."""
    model = step.model_name
    batching = model_cfg.max_batch_size > 0
    inputs = {io.name: io for io in model_cfg.input}
    for model_input, tensor in step.input_map.items():
        if model_input not in inputs:
            raise invalid_arg(f"in ensemble {ensemble}, ensemble tensor {tensor} is mapping "
                              f"to non-existing input {model_input} in model {model}")
    for io in model_cfg.input:
        tensor = step.input_map.get(io.name)
        if tensor is None:
            if io.optional:
                continue
            raise invalid_arg(f"in ensemble {ensemble}, input {io.name} in model {model} is "
                              "not mapped to any ensemble tensors")
        _merge(ensemble, tensor, _tensor(model, batching, io), tensors)
    outputs = {io.name: io for io in model_cfg.output}
    for model_output, tensor in step.output_map.items():
        if model_output not in outputs:
            raise invalid_arg(f"in ensemble {ensemble}, ensemble tensor {tensor} is mapped "
                              f"from non-existing output {model_output} in model {model}")
        _merge(ensemble, tensor, _tensor(model, batching, outputs[model_output]), tensors)


def _merge(ensemble: str, name: str, seen: _Tensor, tensors: dict[str, _Tensor]) -> _Tensor:
    known = tensors.get(name)
    if known is None:
        tensors[name] = seen
        return seen
    _check_consistent(known, seen, f"in ensemble {ensemble}, ensemble tensor {name}: ")
    return known


def _decoupled_flow(cfg: mc.ModelConfig, tensors: dict[str, _Tensor],
                    decoupled_steps: set[int]) -> bool:
    """Follow the data flow from the inputs, labelling each tensor with the decoupled
    step it descends from (0: none); a step whose inputs descend from different
    decoupled steps is refused, as are outputs that do. True when a label was given."""
    steps = cfg.ensemble_scheduling.step
    labels = 0
    step_label: dict[int, int] = {}
    for io in cfg.input:
        tensors[io.name].visited = True
    progress = True
    while progress:
        progress = False
        for index, step in enumerate(steps):
            if index in step_label:
                continue
            sources = [tensors[t] for t in step.input_map.values()]
            if not all(t.visited for t in sources):
                continue
            if len({t.label for t in sources}) > 1:
                raise invalid_arg(f"in ensemble {cfg.name}, step of model '{step.model_name}'"
                                  " receives inputs originated from different decoupled "
                                  "models")
            label = sources[0].label if sources else 0
            if index in decoupled_steps:
                labels += 1
                label = labels
            step_label[index] = label
            for tensor in step.output_map.values():
                tensors[tensor].visited = True
                tensors[tensor].label = label
            progress = True
    if len({tensors[o.name].label for o in cfg.output}) > 1:
        raise invalid_arg(f"in ensemble {cfg.name}, step of model '{cfg.name}' receives "
                          "inputs originated from different decoupled models")
    return labels != 0
