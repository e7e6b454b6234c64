"""Triton's load-time normalization and validation of a ModelConfig, one function per
Triton function (core src/model_config_utils.cc) so each can be compared with it.

Every message is Triton's wording; all are INVALID_ARG unless Triton says otherwise.
Only what can apply to a Python-backend model or an ensemble is here (no TensorRT shape
tensors or profiles beyond the error Triton gives for them). An ensemble's checks that
need its composing models' configs are in pbserve/core/ensemble/validation.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.errors import ErrorCode, ServerError, invalid_arg

WILDCARD_DIM = -1
SEQUENCE_IDLE_DEFAULT_US = 1_000_000  # Triton's SEQUENCE_IDLE_DEFAULT_MICROSECONDS
MIN_COMPUTE_CAPABILITY = 6.0  # Triton's default --min-supported-compute-capability
TENSORRT_PLATFORM = "tensorrt_plan"
ENSEMBLE_PLATFORM = "ensemble"
DEFAULT_INSTANCE_COUNT = 1  # SetDefaultInstanceCount: any group of any backend...
DEFAULT_CPU_INSTANCE_COUNT = 2  # ...but a KIND_CPU group of these backends
DEFAULT_CPU_INSTANCE_COUNT_BACKENDS = ("tensorflow", "onnxruntime")
CPU_PREFERRED_BACKENDS = ("openvino",)  # their preferred group is KIND_CPU, GPUs or not

_Control = mc.ModelSequenceBatching.Control
_Group = mc.ModelInstanceGroup
_CORRID_TYPES = (mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING)


def normalize_model_config(cfg: mc.ModelConfig) -> None:
    """NormalizeModelConfig: the defaults Triton prints in every loaded config."""
    if not cfg.HasField("version_policy"):
        cfg.version_policy.latest.num_versions = 1
    if cfg.HasField("dynamic_batching"):
        db = cfg.dynamic_batching
        if not db.preferred_batch_size and cfg.max_batch_size > 0:
            db.preferred_batch_size.append(cfg.max_batch_size)
    if cfg.HasField("sequence_batching"):
        sb = cfg.sequence_batching
        if sb.max_sequence_idle_microseconds == 0:
            sb.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_US
        if sb.HasField("oldest") and not sb.oldest.preferred_batch_size \
                and cfg.max_batch_size > 0:
            sb.oldest.preferred_batch_size.append(cfg.max_batch_size)
    if not cfg.HasField("ensemble_scheduling"):
        opt = cfg.optimization
        if not opt.HasField("input_pinned_memory"):
            opt.input_pinned_memory.enable = True
        if not opt.HasField("output_pinned_memory"):
            opt.output_pinned_memory.enable = True


def validate_model_config(cfg: mc.ModelConfig) -> None:
    """ValidateModelConfig, minus the platform/backend pairing of other backends."""
    name = cfg.name
    if not name:
        raise invalid_arg("model configuration must specify 'name'")
    if not cfg.backend:
        if cfg.platform != ENSEMBLE_PLATFORM:
            raise invalid_arg(f"unexpected platform type '{cfg.platform}' for {name}")
    elif cfg.platform == ENSEMBLE_PLATFORM:
        raise invalid_arg(f"Ensemble model '{name}' must have platform type '{cfg.platform}' "
                          "and empty backend type")
    if cfg.max_batch_size < 0:
        raise invalid_arg(f"'max_batch_size' must be non-negative value for {name}")
    if not cfg.HasField("version_policy"):
        raise invalid_arg(f"must specify 'version policy' for {name}")
    if cfg.HasField("dynamic_batching"):
        _validate_dynamic_batching(cfg)
    if cfg.HasField("sequence_batching"):
        _validate_sequence_batching(cfg)
    if cfg.HasField("ensemble_scheduling"):
        validate_ensemble_scheduling(cfg)
    elif cfg.platform == ENSEMBLE_PLATFORM:
        raise invalid_arg(f"must specify 'step' for ensemble '{name}'")
    if cfg.model_transaction_policy.decoupled and cfg.response_cache.enable:
        raise invalid_arg(f"Response Cache does not currently support model {name} with "
                          "'decoupled' transaction policy. Please disable the response cache.")
    if cfg.HasField("model_metrics"):
        _validate_model_metrics(cfg.model_metrics)


def validate_ensemble_scheduling(cfg: mc.ModelConfig) -> None:
    """ValidateEnsembleSchedulingConfig: the steps' structure alone (every input used,
    every output written, each tensor written once, no tensor left unused)."""
    name = cfg.name
    if cfg.platform != ENSEMBLE_PLATFORM:
        raise invalid_arg(f"ensemble scheduling cannot be set for model '{name}' whose "
                          f"platform is not {ENSEMBLE_PLATFORM}")
    if cfg.instance_group:
        raise invalid_arg(f"instance group should not be specified for ensemble '{name}'")
    if cfg.HasField("optimization"):
        raise invalid_arg(f"optimization should not be specified for ensemble '{name}'")
    if cfg.model_warmup:
        raise invalid_arg(f"model_warmup can not be specified for ensemble '{name}'")
    if not cfg.ensemble_scheduling.step:
        raise invalid_arg(f"must specify 'step' for ensemble '{name}'")
    written: set[str] = set()
    consumers: dict[str, set[int]] = {}  # ensemble tensor -> steps reading it
    producer: dict[str, int] = {}  # ensemble tensor -> the step writing it
    for index, step in enumerate(cfg.ensemble_scheduling.step):
        for field in ("model_name", "input_map", "output_map"):
            if not getattr(step, field):
                raise invalid_arg(f"must specify '{field}' in step {index} of ensemble "
                                  f"'{name}'")
        for tensor in step.output_map.values():
            if tensor in written:
                raise invalid_arg(f"ensemble tensor '{tensor}' can appear in an output map "
                                  f"only once for ensemble '{name}' step {index}")
            written.add(tensor)
            producer[tensor] = index
        for tensor in step.input_map.values():
            consumers.setdefault(tensor, set()).add(index)
    known = written | set(consumers)
    ready = {i.name for i in cfg.input}
    for tensor in ready:
        if tensor not in known:
            raise invalid_arg(f"ensemble input '{tensor}' for ensemble {name}' is not used")
    steps = cfg.ensemble_scheduling.step
    done: set[int] = set()
    progress = True
    while progress:  # the data flow: a step runs once all of its inputs are ready
        progress = False
        for index, step in enumerate(steps):
            if index not in done and all(t in ready for t in step.input_map.values()):
                done.add(index)
                ready.update(step.output_map.values())
                progress = True
    outputs = {o.name for o in cfg.output}
    for output in cfg.output:
        if output.name not in known:
            raise invalid_arg(f"ensemble output '{output.name}' for ensemble {name}' is not "
                              "used")
        if output.name not in ready:
            message = f"output '{output.name}' for ensemble '{name}' is not written"
            source = _unready_source(output.name, steps, producer, ready)
            if source != output.name:
                message += (f": at least one of its depending tensors, '{source}', is not "
                            "connected")
            raise invalid_arg(message)
    for tensor in sorted(known - outputs):
        if tensor not in ready or tensor not in consumers:
            raise invalid_arg(f"ensemble tensor '{tensor}' is unused in ensemble '{name}'")


def _unready_source(tensor: str, steps: Sequence[mc.ModelEnsembling.Step],
                    producer: dict[str, int], ready: set[str]) -> str:
    """The first tensor up the chain from `tensor` that nothing makes ready."""
    seen = {tensor}
    while tensor in producer:
        inputs = steps[producer[tensor]].input_map.values()
        unready = next((t for t in inputs if t not in ready and t not in seen), None)
        if unready is None:
            break
        seen.add(unready)
        tensor = unready
    return tensor


def _validate_dynamic_batching(cfg: mc.ModelConfig) -> None:
    name, db = cfg.name, cfg.dynamic_batching
    for size in db.preferred_batch_size:
        if size <= 0:
            raise invalid_arg(f"dynamic batching preferred size must be positive for {name}")
        if size > cfg.max_batch_size:
            raise invalid_arg(
                f"dynamic batching preferred size must be <= max batch size for {name}")
    levels = db.priority_levels
    if levels != 0:
        if db.default_priority_level == 0 or db.default_priority_level > levels:
            raise invalid_arg(f"default priority level must be in range [1, {levels}] for {name}")
        for level in db.priority_queue_policy:
            if level == 0 or level > levels:
                raise invalid_arg("priority queue policy must have priority level in range "
                                  f"[1, {levels}] for {name}")
    if db.preserve_ordering:
        if levels > 1:
            raise invalid_arg("Only one priority level is allowed when 'preserve_ordering' "
                              f"is true for {name}")
        policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
        for policy in policies:
            if policy.default_timeout_microseconds != 0 \
                    and policy.timeout_action == mc.ModelQueuePolicy.DELAY:
                raise invalid_arg("Queue policy can not have DELAY as timeout action when "
                                  f"'preserve_ordering' is true for {name}")


def _validate_sequence_batching(cfg: mc.ModelConfig) -> None:
    name, sb = cfg.name, cfg.sequence_batching
    if cfg.response_cache.enable:
        raise invalid_arg(f"Response Cache does not currently support model {name} with "
                          "sequence batching scheduler. Please disable the response cache.")
    for kind in (_Control.CONTROL_SEQUENCE_START, _Control.CONTROL_SEQUENCE_END,
                 _Control.CONTROL_SEQUENCE_READY):
        sequence_control(sb, name, kind)
    tensor, dtype = sequence_control(sb, name, _Control.CONTROL_SEQUENCE_CORRID)
    if tensor and dtype not in _CORRID_TYPES:
        raise invalid_arg(
            "unexpected data type for control CONTROL_SEQUENCE_CORRID for " + name
            + ". Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 "
            "and TYPE_STRING")
    if sb.HasField("oldest"):
        for size in sb.oldest.preferred_batch_size:
            if size <= 0:
                raise invalid_arg(
                    f"sequence batching preferred batch size must be positive for {name}")
            if size > cfg.max_batch_size:
                raise invalid_arg("sequence batching preferred batch size must be <= max "
                                  f"batch size for {name}")
    if sb.HasField("direct"):
        utilization = sb.direct.minimum_slot_utilization
        if utilization < 0.0 or utilization > 1.0:
            raise invalid_arg("sequence batching minimum slot utilization must be in range "
                              f"(0.0, 1.0] for {name}")


def sequence_control(sb: mc.ModelSequenceBatching, model: str,
                     kind: int) -> tuple[str, int]:
    """Get{Boolean,Typed}SequenceControlProperties: the tensor name and data type of
    control `kind` ("" and TYPE_INVALID when absent), checking the control inputs."""
    kind_name = _Control.Kind.Name(kind)
    boolean = kind != _Control.CONTROL_SEQUENCE_CORRID
    seen_tensors: set[str] = set()
    tensor, dtype = "", mc.TYPE_INVALID
    for control_input in sb.control_input:
        if not control_input.name:
            raise invalid_arg(f"sequence batching control tensor must have a name for {model}")
        if control_input.name in seen_tensors:
            raise invalid_arg(f"sequence batching control tensor '{control_input.name}' is "
                              f"specified for multiple control kinds for {model}")
        seen_tensors.add(control_input.name)
        for control in control_input.control:
            if control.kind != kind:
                continue
            if tensor:
                raise invalid_arg(
                    f"sequence batching specifies multiple {kind_name} tensors for {model}")
            tensor = control_input.name
            dtype = _boolean_control_type(control, kind_name, model) if boolean \
                else _typed_control_type(control, kind_name, model)
    return tensor, dtype


def _boolean_control_type(control: Any, kind_name: str, model: str) -> int:
    given = [(field, mc_type) for field, mc_type in (
        ("int32_false_true", mc.TYPE_INT32), ("fp32_false_true", mc.TYPE_FP32),
        ("bool_false_true", mc.TYPE_BOOL)) if len(getattr(control, field))]
    if not given:
        raise invalid_arg("sequence batching must specify either 'int32_false_true', "
                          f"'fp32_false_true' or 'bool_false_true' for {kind_name} for {model}")
    if len(given) > 1:
        raise invalid_arg("sequence batching specifies more than one from 'int32_false_true', "
                          f"'fp32_false_true' and 'bool_false_true' for {kind_name} for {model}")
    field, dtype = given[0]
    if len(getattr(control, field)) != 2:
        raise invalid_arg(f"sequence batching control '{field}' must have exactly 2 entries "
                          f"for {kind_name} for {model}")
    return dtype


def _typed_control_type(control: Any, kind_name: str, model: str) -> int:
    if control.int32_false_true or control.fp32_false_true or control.bool_false_true:
        raise invalid_arg("sequence batching must not specify either 'int32_false_true', "
                          f"'fp32_false_true' or 'bool_false_true' for {kind_name} for {model}")
    return control.data_type


def _validate_model_metrics(metrics: mc.ModelMetrics) -> None:
    for control in metrics.metric_control:
        if not control.HasField("metric_identifier"):
            raise invalid_arg("metric control must specify 'metric_identifier'")
        if not control.metric_identifier.family:
            raise invalid_arg("metric identifier must specify non-empty 'family'")
        if not control.HasField("histogram_options"):
            raise invalid_arg("metric control must specify 'histogram_options'")
        if not control.histogram_options.buckets:
            raise invalid_arg("histogram options must specify non-empty 'buckets'")


# ---------------------------------------------------------------------------
# instance groups
# ---------------------------------------------------------------------------

def normalize_instance_groups(cfg: mc.ModelConfig, gpus: Sequence[int]) -> None:
    """NormalizeInstanceGroup with the python backend's preferred group (KIND_GPU in
    a GPU build, KIND_CPU otherwise, count unset; Triton's onnxruntime and pytorch
    backends name none, which resolves to the same kind; openvino's is KIND_CPU). No
    GPUs: the one default group is named after the model (its instances are
    "<model>_0"...) and KIND_AUTO is CPU. A group without a count (or count < 1) gets
    `default_instance_count`."""
    if cfg.HasField("ensemble_scheduling"):
        return
    if not cfg.instance_group:
        group = cfg.instance_group.add()
        group.name = cfg.name  # Triton's default group carries the bare model name
        cpu_only = cfg.backend in CPU_PREFERRED_BACKENDS
        group.kind = _Group.KIND_GPU if gpus and not cpu_only else _Group.KIND_CPU
    for index, group in enumerate(cfg.instance_group):
        if not group.name:
            group.name = f"{cfg.name}_{index}"
        if group.kind == _Group.KIND_AUTO:
            usable = bool(gpus) and all(g in gpus for g in group.gpus)
            group.kind = _Group.KIND_GPU if usable else _Group.KIND_CPU
        if group.count < 1:
            group.count = default_instance_count(group.kind, cfg.backend)
        if group.kind == _Group.KIND_GPU and not group.gpus:
            group.gpus.extend(gpus)


def default_instance_count(kind: int, backend: str) -> int:
    """SetDefaultInstanceCount: 2 for a KIND_CPU group of the onnxruntime or tensorflow
    backend (by the config's backend name, a Python-based backend of that name too),
    1 otherwise (python, pytorch, every KIND_GPU or KIND_MODEL group)."""
    if kind == _Group.KIND_CPU and backend in DEFAULT_CPU_INSTANCE_COUNT_BACKENDS:
        return DEFAULT_CPU_INSTANCE_COUNT
    return DEFAULT_INSTANCE_COUNT


def validate_instance_groups(cfg: mc.ModelConfig, gpus: Sequence[int]) -> None:
    """ValidateInstanceGroup; without `gpus` it answers as a CPU-only Triton build."""
    if cfg.HasField("ensemble_scheduling"):
        return
    name = cfg.name
    if not cfg.instance_group:
        raise invalid_arg(f"must specify one or more 'instance group's for {name}")
    for group in cfg.instance_group:
        what = f"instance group {group.name} of model {name}"
        if group.kind == _Group.KIND_MODEL:
            if group.gpus:
                raise invalid_arg(f"{what} has kind KIND_MODEL but specifies one or more GPUs")
        elif group.kind == _Group.KIND_GPU:
            if not gpus:
                raise invalid_arg(f"{what} has kind KIND_GPU but server does not support GPUs")
            if not group.gpus:
                raise invalid_arg(f"{what} has kind KIND_GPU but specifies no GPUs")
            for gid in group.gpus:
                if gid not in gpus:
                    raise invalid_arg(
                        f"{what} specifies invalid or unsupported gpu id {gid}. GPUs with at "
                        "least the minimum required CUDA compute compatibility of "
                        f"{MIN_COMPUTE_CAPABILITY:f} are: {', '.join(map(str, gpus))}")
        elif group.kind == _Group.KIND_CPU:
            if group.gpus:
                raise invalid_arg(f"{what} has kind KIND_CPU but specifies one or more GPUs")
        else:
            raise ServerError(ErrorCode.INTERNAL, f"{what} has unexpected kind KIND_AUTO")
        if group.profile and cfg.platform != TENSORRT_PLATFORM:
            # Triton's text has no space before "specifies".
            raise invalid_arg(f"{what} and platform {cfg.platform}specifies profile field "
                              "which is only supported for TensorRT models")


# ---------------------------------------------------------------------------
# inputs and outputs
# ---------------------------------------------------------------------------

def validate_io_config(cfg: mc.ModelConfig) -> None:
    """ValidateModelIOConfig: every message ends with " for <model>". Names used
    twice are refused too (pbserve's rule: Triton keeps the first silently)."""
    for kind, ios in (("input", cfg.input), ("output", cfg.output)):
        seen: set[str] = set()
        for io in ios:
            try:
                _validate_io(io, kind, cfg)
            except ServerError as exc:
                raise ServerError(exc.code, f"{exc.message} for {cfg.name}") from None
            if io.name in seen:
                raise invalid_arg(
                    f"model {kind} '{io.name}' is specified more than once for {cfg.name}")
            seen.add(io.name)


def _validate_io(io: Any, kind: str, cfg: mc.ModelConfig) -> None:
    """ValidateModelInput / ValidateModelOutput."""
    _validate_io_shape(io, cfg.max_batch_size, f"model {kind} ")
    if kind == "input" and io.format in (mc.ModelInput.FORMAT_NHWC, mc.ModelInput.FORMAT_NCHW) \
            and len(io.dims) != 3:
        raise invalid_arg("model input NHWC/NCHW require 3 dims")
    if cfg.platform != TENSORRT_PLATFORM and io.is_shape_tensor:
        raise invalid_arg("shape tensors are only supported for TensorRT platform")
    if io.is_non_linear_format_io and cfg.platform != TENSORRT_PLATFORM:
        raise invalid_arg("Non-linear IO format is only supported for the TensorRT platform")


def _validate_io_shape(io: Any, max_batch_size: int, prefix: str) -> None:
    """ValidateIOShape."""
    if not io.name:
        raise invalid_arg(f"{prefix}must specify 'name'")
    prefix = f"{prefix}'{io.name}' "
    if io.data_type == mc.TYPE_INVALID:
        raise invalid_arg(f"{prefix}must specify 'data_type'")
    if not io.dims:
        raise invalid_arg(f"{prefix}must specify 'dims'")
    has_reshape = io.HasField("reshape")
    if has_reshape and not io.reshape.shape and max_batch_size == 0:
        raise invalid_arg(f"{prefix}cannot have empty reshape for non-batching model as "
                          "scalar tensors are not supported")
    for dim in io.dims:
        if dim < 1 and dim != WILDCARD_DIM:
            raise invalid_arg(f"{prefix}dimension must be integer >= 1, or {WILDCARD_DIM} to "
                              "indicate a variable-size dimension")
    if not has_reshape:
        return
    for dim in io.reshape.shape:
        if dim < 1 and dim != WILDCARD_DIM:
            raise invalid_arg(f"{prefix}reshape dimensions must be integer >= 1, or "
                              f"{WILDCARD_DIM} to indicate a variable-size dimension")
    dims_size = _plain_count(io.dims)
    reshape_size = _plain_count(io.reshape.shape)
    # An empty reshape (count 0) stands for dims of one element.
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        raise invalid_arg(f"{prefix}has different size for dims and reshape")
    if dims_size == WILDCARD_DIM:
        # Each run between variable-size dims must hold the same number of elements.
        dim_runs, reshape_runs = _runs(io.dims), _runs(io.reshape.shape)
        if len(dim_runs) != len(reshape_runs):
            raise invalid_arg(f"{prefix}has different number of variable-size dimensions for "
                              "dims and reshape")
        if dim_runs != reshape_runs:
            raise invalid_arg(f"{prefix}has different size for dims and reshape")


def _plain_count(dims: Sequence[int]) -> int:
    """Element count of config dims (already checked >= 1 or -1): -1 if variable,
    0 for an empty list, as Triton's GetElementCount."""
    if WILDCARD_DIM in dims:
        return WILDCARD_DIM
    count = 0
    for index, dim in enumerate(dims):
        count = dim if index == 0 else count * dim
    return count


def _runs(dims: Sequence[int]) -> list[int]:
    runs, current = [], 1
    for dim in dims:
        if dim == WILDCARD_DIM:
            runs.append(current)
            current = 1
        else:
            current *= dim
    runs.append(current)
    return runs
