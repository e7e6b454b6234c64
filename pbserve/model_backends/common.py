"""What pbserve's built-in backends share: the config's tensors, batching requests
along dimension 0 (Triton's backends gather a batch's inputs into one tensor and split
each output back to its requests), responses, Triton's shape words, and the sequence
batcher's control inputs and implicit state (`sequence_batching.state`, kept per
sequence here; the states themselves: implicit_state.py).

Imported in the stub, by the backends' model.py files; numpy and pb_utils only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

import triton_python_backend_utils as pb_utils
from pbserve.model_backends.implicit_state import StateSpec, with_initial
from pbserve.model_backends.ragged import (
    batch_input_value, batch_inputs, batch_outputs, ragged_inputs, scatter_with_input_shape)

FLAG_SEQUENCE_START = 1  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
FLAG_SEQUENCE_END = 2
_CONTROL_TYPES = (("int32_false_true", "TYPE_INT32"), ("fp32_false_true", "TYPE_FP32"),
                  ("bool_false_true", "TYPE_BOOL"))


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of the config: the shape a request has (dims) and, with a
    `reshape`, the shape the framework's tensor has (both without the batch dimension)."""
    name: str
    data_type: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None
    optional: bool = False

    @property
    def model_dims(self) -> tuple[int, ...]:
        return self.dims if self.reshape is None else self.reshape


def tensor_specs(config: dict[str, Any], kind: str) -> list[TensorSpec]:
    """The config's "input" or "output" list as TensorSpecs."""
    specs = []
    for io in config.get(kind, []):
        reshape = io.get("reshape")
        specs.append(TensorSpec(
            io["name"], io.get("data_type", "TYPE_INVALID"), tuple(int(d) for d in io["dims"]),
            tuple(int(d) for d in reshape.get("shape", [])) if reshape is not None else None,
            bool(io.get("optional", False))))
    return specs


@dataclass(frozen=True)
class ControlSpec:
    """A `sequence_batching.control_input` tensor: its name, the kind of its (first)
    control and the data type the sequence batcher gives it."""
    name: str
    kind: str
    data_type: str


def control_specs(config: dict[str, Any]) -> list[ControlSpec]:
    """The sequence batcher's control tensors (START/END/READY/CORRID), which reach the
    model as inputs of every request named as the config names them."""
    specs = []
    for control_input in config.get("sequence_batching", {}).get("control_input", []):
        for control in control_input.get("control", []):
            kind = str(control.get("kind", "CONTROL_SEQUENCE_START"))
            if kind == "CONTROL_SEQUENCE_CORRID":
                data_type = control.get("data_type", "TYPE_INVALID")
            else:
                data_type = next((t for field, t in _CONTROL_TYPES if control.get(field)),
                                 "TYPE_INVALID")
            specs.append(ControlSpec(control_input["name"], kind, data_type))
            break
    return specs


def log_instance_device(args: dict[str, Any], on_gpu: bool, device_id: int) -> None:
    """Triton's line for an instance's start, naming where it really runs (a KIND_GPU
    instance that falls back to the CPU says CPU)."""
    pb_utils.Logger.log_info(
        f"TRITONBACKEND_ModelInstanceInitialize: {args.get('model_instance_name', '')} "
        f"({'GPU' if on_gpu else 'CPU'} device {device_id if on_gpu else 0})")


def shape_string(shape: Sequence[int]) -> str:
    """Triton's ShapeToString: [-1,3,4]."""
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def parameter(config: dict[str, Any], key: str, default: str = "") -> str:
    """A config parameter's string_value."""
    value = config.get("parameters", {}).get(key)
    if isinstance(value, dict):
        return str(value.get("string_value", default))
    return default


def bool_parameter(config: dict[str, Any], key: str, default: bool) -> bool:
    text = parameter(config, key, "").strip().lower()
    if not text:
        return default
    return text in ("true", "1", "yes", "on")


def int_parameter(config: dict[str, Any], key: str, default: int = 0) -> int:
    text = parameter(config, key, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"failed to convert '{key}' value '{text}' to an integer") from None


Run = Callable[[dict[str, np.ndarray], list[str]], dict[str, np.ndarray]]


class Batcher:
    """Runs a list of requests through `run(inputs, output names) -> outputs`: with
    `max_batch_size > 0`, requests whose inputs have the same shapes past dimension 0
    run as one batch (their inputs concatenated, each output split back by the
    requests' batch sizes); otherwise each request runs alone. A ragged input's shapes
    may differ: it runs as one 1-D tensor, with the config's batch inputs beside it and
    its batch outputs cut by request (ragged.py). An error fails the requests of its
    batch only, with its message."""

    def __init__(self, config: dict[str, Any], run: Run,
                 describe: Callable[[BaseException], str] = str,
                 states: Sequence[StateSpec] = (), model_dir: str = "") -> None:
        self.batching = int(config.get("max_batch_size", 0)) > 0
        self.inputs = tensor_specs(config, "input")
        self.outputs = tensor_specs(config, "output")
        self.output_names = [o.name for o in self.outputs]
        self._reshape_out = {o.name: o for o in self.outputs if o.reshape is not None}
        self.controls = [c.name for c in control_specs(config)]
        self.ragged = ragged_inputs(config)
        self.batch_inputs = batch_inputs(config) if self.batching else []
        self._scatter = {name: (b.source, (-1, *self._dims_of(name)))
                         for b in (batch_outputs(config) if self.batching else [])
                         for name in b.targets}
        self.states = with_initial(states, model_dir)  # ValueError: the load fails
        # implicit state: correlation id -> {state output name: its last value}
        self._kept: dict[int | str, dict[str, np.ndarray]] = {}
        self.run = run
        self.describe = describe

    @property
    def scattered(self) -> frozenset[str]:
        """The outputs a batch output cuts by its source input's shapes."""
        return frozenset(self._scatter)

    def _dims_of(self, output: str) -> tuple[int, ...]:
        spec = next((o for o in self.outputs if o.name == output), None)
        if spec is None:
            raise ValueError(f"batch output '{output}' is not an output of the model")
        return spec.dims

    def drop_sequence(self, correlation_id: int | str) -> None:
        """Forget a sequence's implicit state (it ended without END)."""
        self._kept.pop(correlation_id, None)

    def execute(self, requests: list) -> list:
        responses: list = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        gathered = []
        for index, request in enumerate(requests):
            try:
                arrays = self._request_inputs(request)
            except Exception as exc:  # noqa: BLE001 - that request fails, alone
                responses[index] = self._error(exc)
                gathered.append(None)
                continue
            gathered.append(arrays)
            key = tuple((n, () if n in self.ragged else a.shape[1:], a.dtype.str)
                        for n, a in sorted(arrays.items())) if self.batching else (index,)
            groups.setdefault(key, []).append(index)
        for indices in groups.values():
            self._run_group(requests, gathered, indices, responses)
        return responses

    def _request_inputs(self, request) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {}
        for spec in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, spec.name)
            if tensor is None:
                continue  # an optional input the request left out
            array = tensor.as_numpy()
            if spec.reshape is not None:
                batch = (array.shape[0],) if self.batching else ()
                array = array.reshape(batch + spec.reshape)
            arrays[spec.name] = array
        for name in self.controls:  # the sequence batcher's, in the config's data type
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                arrays[name] = tensor.as_numpy()
        if self.states:
            kept = None
            if not request.flags() & FLAG_SEQUENCE_START:
                kept = self._kept.get(request.correlation_id())
            for state in self.states:
                value = kept.get(state.output_name) if kept is not None else None
                if value is None:
                    value = state.initial[None] if self.batching else state.initial
                arrays[state.input_name] = value
        return arrays

    def _run_group(self, requests: list, gathered: list, indices: list[int],
                   responses: list) -> None:
        wanted = [self._wanted(requests[i]) for i in indices]
        names = [n for n in self.output_names if any(n in w for w in wanted)]
        computed = names + [s.output_name for s in self.states if s.output_name not in names]
        try:
            outputs = self.run(self._batch(gathered, indices), computed)
            sizes = [_batch_size(gathered[i]) for i in indices] if self.batching else None
            pieces = self._split(outputs, computed, sizes, len(indices))
            for name in computed:
                if name in self._scatter:
                    source, dims = self._scatter[name]
                    pieces[name] = scatter_with_input_shape(
                        outputs[name], dims, [gathered[i][source].shape for i in indices])
        except Exception as exc:  # noqa: BLE001 - the batch's requests fail with it
            for i in indices:
                responses[i] = self._error(exc)
                if self.states and requests[i].flags() & FLAG_SEQUENCE_END:
                    self._kept.pop(requests[i].correlation_id(), None)
            return
        if self.states:
            self._keep(requests, indices, pieces)
        for position, i in enumerate(indices):
            responses[i] = pb_utils.InferenceResponse([
                pb_utils.Tensor(name, pieces[name][position])
                for name in names if name in wanted[position]])

    def _batch(self, gathered: list, indices: list[int]) -> dict[str, np.ndarray]:
        """The framework's inputs for the requests at `indices`: each input concatenated
        along dimension 0 (a ragged one flattened into 1-D), and the batch inputs."""
        arrays = [gathered[i] for i in indices]
        inputs = {}
        for name in arrays[0]:
            if name in self.ragged:
                inputs[name] = np.concatenate([a[name].reshape(-1) for a in arrays])
            else:
                inputs[name] = arrays[0][name] if len(arrays) == 1 else \
                    np.concatenate([a[name] for a in arrays])
        for spec in self.batch_inputs:
            value = batch_input_value(spec, [a[spec.source].shape for a in arrays])
            for target in spec.targets:
                inputs[target] = value
        return inputs

    def _keep(self, requests: list, indices: list[int],
              pieces: dict[str, list[np.ndarray]]) -> None:
        """Each request's state outputs become its sequence's next state inputs (a copy:
        not a view of the batch's output); the sequence's END drops them."""
        for position, i in enumerate(indices):
            corrid = requests[i].correlation_id()
            if requests[i].flags() & FLAG_SEQUENCE_END:
                self._kept.pop(corrid, None)
            else:
                self._kept[corrid] = {s.output_name: np.array(pieces[s.output_name][position])
                                      for s in self.states}

    def _wanted(self, request) -> set[str]:
        requested = request.requested_output_names()
        return set(requested) if requested else set(self.output_names)

    def _split(self, outputs: dict[str, np.ndarray], names: list[str],
               sizes: list[int] | None, count: int) -> dict[str, list[np.ndarray]]:
        pieces: dict[str, list[np.ndarray]] = {}
        for name in names:
            if name in self._scatter:
                continue  # cut by its source input's shapes (_run_group)
            array = outputs[name]
            spec = self._reshape_out.get(name)
            if spec is not None:
                batch = (array.shape[0],) if self.batching else ()
                array = array.reshape(batch + spec.dims)
            if sizes is None:
                pieces[name] = [array] * count
                continue
            total = sum(sizes)
            if array.ndim == 0 or array.shape[0] != total:
                raise ValueError(
                    f"output '{name}' of a batch of {total} has shape "
                    f"{shape_string(array.shape)}: its first dimension must be the batch")
            if len(sizes) == 1:
                pieces[name] = [array]
                continue
            start, parts = 0, []
            for size in sizes:
                parts.append(array[start:start + size])
                start += size
            pieces[name] = parts
        return pieces

    def _error(self, exc: BaseException):
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(self.describe(exc)))


def _batch_size(arrays: dict[str, np.ndarray]) -> int:
    for array in arrays.values():
        return int(array.shape[0]) if array.ndim else 1
    return 1


def compare_dims(model_name: str, tensor_name: str, model_shape: Sequence[int],
                 dims: Sequence[int], max_batch_size: int) -> None:
    """Triton's CompareDimsSupported (onnxruntime backend): the config's dims must
    match the model's shape (-1 in the model matches anything); ValueError in Triton's
    words if not."""
    model_shape = [int(d) for d in model_shape]
    if max_batch_size > 0:
        if not model_shape or model_shape[0] != -1:
            raise ValueError(
                f"model '{model_name}', tensor '{tensor_name}': for the model to support "
                "batching the shape should have at least 1 dimension and the first "
                "dimension must be -1; but shape expected by the model is "
                f"{shape_string(model_shape)}")
        full = [-1, *dims]
        if not _dims_match(model_shape, full):
            raise dims_mismatch(model_name, tensor_name, model_shape, full, batched=True)
    elif not _dims_match(model_shape, list(dims)):
        raise dims_mismatch(model_name, tensor_name, model_shape, dims, batched=False)


def dims_mismatch(model_name: str, tensor_name: str, model_shape: Sequence[int],
                  config_shape: Sequence[int], batched: bool) -> ValueError:
    """Triton's words (CompareDimsSupported) for a config whose shape is not the model's:
    `config_shape` begins with the batch dimension when `batched`."""
    head = (f"model '{model_name}', tensor '{tensor_name}': the model expects "
            f"{len(model_shape)} dimensions (shape {shape_string(model_shape)}) but the model "
            f"configuration specifies {len(config_shape)} dimensions ")
    if batched:
        return ValueError(f"{head}(an initial batch dimension because max_batch_size > 0 "
                          "followed by the explicit tensor shape, making complete shape "
                          f"{shape_string(config_shape)})")
    return ValueError(f"{head}(shape {shape_string(config_shape)})")


def _dims_match(model_shape: list[int], dims: list[int]) -> bool:
    return len(model_shape) == len(dims) and all(
        m == -1 or m == d for m, d in zip(model_shape, dims))
