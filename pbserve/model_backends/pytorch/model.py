"""pbserve's built-in PyTorch backend: a Python-based backend (pbserve/model_backends) serving
TorchScript models (`platform: "pytorch_libtorch"` or `backend: "pytorch"`, or a
`model.pt` and no config) from `<version>/model.pt` (or `default_model_filename`) with
`torch.jit.load`, as Triton's pytorch backend does: its naming rules for inputs (the
forward() argument names, else `<name>__<index>`, else the config's order) and outputs
(`<name>__<index>`, else the config's order), a single Dict(str, Tensor) argument,
the DISABLE_OPTIMIZED_EXECUTION and INFERENCE_MODE parameters, batching along dimension
0, KIND_GPU instances on their CUDA device, the sequence batcher's control inputs and
implicit state. The config must name inputs and outputs (no auto-complete, as in
Triton). See docs/backends.md.
"""

from __future__ import annotations

import json
import os
import re
import warnings

import numpy as np

import triton_python_backend_utils as pb_utils
from pbserve.model_backends import missing_package_message
from pbserve.model_backends.common import (
    Batcher, bool_parameter, control_specs, log_instance_device, tensor_specs)
from pbserve.model_backends.implicit_state import state_specs
from pbserve.model_backends.ragged import batch_input_targets

try:
    import torch
except ImportError as _error:  # the model fails to load, naming what to install
    raise ImportError(missing_package_message("pytorch", "torch", _error)) from None

_NAMED_INDEX = re.compile(r"^.*?__(\d+)$")
# the config data types Triton's pytorch backend takes (ModelConfigDataTypeToTorchType,
# and TYPE_STRING as List[str]); any other fails the load
_CONFIG_TYPES = ("TYPE_BOOL", "TYPE_UINT8", "TYPE_INT8", "TYPE_INT16", "TYPE_INT32",
                 "TYPE_INT64", "TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_STRING")
_DATATYPES = {
    torch.bool: "BOOL", torch.uint8: "UINT8", torch.int8: "INT8", torch.int16: "INT16",
    torch.int32: "INT32", torch.int64: "INT64", torch.float16: "FP16",
    torch.float32: "FP32", torch.float64: "FP64", torch.bfloat16: "BF16",
}


def _index(name: str) -> int | None:
    """The index of a `<name>__<index>` tensor name, None for another name."""
    delimiter = name.find("__")
    if delimiter < 0:
        return None
    digits = name[delimiter + 2:]
    return int(digits) if digits.isdigit() else None


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.name = args["model_name"]
        self.device = torch.device("cpu")
        if args.get("model_instance_kind") == "GPU" and torch.cuda.is_available():
            self.device = torch.device("cuda", int(args.get("model_instance_device_id") or 0))
        path = os.path.join(pb_utils.get_model_dir(),
                            self.config.get("default_model_filename") or "model.pt")
        self.module = torch.jit.load(path, map_location=self.device)
        self.module.eval()
        log_instance_device(args, self.device.type == "cuda", self.device.index or 0)
        self.optimized = not bool_parameter(self.config, "DISABLE_OPTIMIZED_EXECUTION", False)
        self.inference_mode = bool_parameter(self.config, "INFERENCE_MODE", True)
        self.inputs = tensor_specs(self.config, "input")
        self.outputs = tensor_specs(self.config, "output")
        controls = control_specs(self.config)
        self._check_controls(controls)
        self.controls = [c.name for c in controls]
        self.states = state_specs(self.config)
        self._map_inputs()
        self._check_types("input", self.inputs)
        self._check_state_inputs()
        self._map_outputs()
        # inputs are views of shared memory, which torch only reads here
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        self.batcher = Batcher(self.config, self._run, states=self.states,
                               model_dir=args.get("model_repository", ""))

    def _check_controls(self, controls) -> None:
        """Triton's ValidateTypedSequenceControl: a CORRID control's data type must be
        one torch has (not TYPE_STRING, no unsigned type but UINT8)."""
        for control in controls:
            if control.kind == "CONTROL_SEQUENCE_CORRID" and (
                    control.data_type not in _CONFIG_TYPES or control.data_type == "TYPE_STRING"):
                raise ValueError(f"input '{control.name}' type '{control.data_type}' is not "
                                 "supported by PyTorch.")

    def _check_state_inputs(self) -> None:
        """Triton's ValidateInputs for the state inputs: a data type torch has, or
        TYPE_STRING (a List[str])."""
        for state in self.states:
            if state.data_type not in _CONFIG_TYPES:
                raise ValueError(f"unsupported datatype {state.data_type} for input state "
                                 f"'{state.input_name}' for model '{self.name}'")

    def _map_inputs(self) -> None:
        """Triton's ValidateInputs and naming convention: where each config input goes
        in forward()'s arguments."""
        arguments = list(self.module.forward.schema.arguments)
        if arguments and arguments[0].name == "self":
            arguments = arguments[1:]
        kinds = [str(a.type) for a in arguments]
        self.dict_input = len(arguments) == 1 and kinds[0].startswith("Dict")
        if not self.inputs:
            raise ValueError("model configuration must contain at least one input, none "
                             "were specified.")
        self.input_index: dict[str, int] = {}
        if self.dict_input:
            return
        for kind in kinds:
            if kind.startswith("Dict"):
                raise ValueError("Multiple inputs of kind DictType were detected. Only a "
                                 "single input of type Dict(str, Tensor) is supported.")
            if kind != "Tensor" and not kind.startswith("List"):
                raise ValueError(
                    f"An input of type '{kind}' was detected in the model. Only a single input "
                    "of type Dict(str, Tensor) or input(s) of type Tensor are supported.")
        sequence = self.controls + [s.input_name for s in self.states]
        made = batch_input_targets(self.config)
        expected = len(self.inputs) + len(sequence) + len(made)
        if len(arguments) != expected:
            raise ValueError(f"unable to load model '{self.name}', configuration expects "
                             f"{expected} inputs, model provides {len(arguments)}")
        allowed = [a.name for a in arguments]
        names = [i.name for i in self.inputs]
        by_argument = all(n in allowed for n in names)
        if by_argument:
            self.input_index = {n: allowed.index(n) for n in names}
        elif all(_index(n) is not None for n in names):
            self.input_index = {n: _index(n) for n in names}
        else:
            pb_utils.Logger.log_warn(
                f"input names of model '{self.name}' are neither input arguments of the model "
                "nor do they follow the <name>__<index> naming convention. Falling back to "
                "enforcing strict ordering from model configuration.")
            self.input_index = {n: i for i, n in enumerate(names)}
        # control and state inputs: by <name>__<index> (Triton), or by a forward()
        # argument's name when the config's inputs are named so
        for name in sequence:
            if by_argument and name in allowed:
                self.input_index[name] = allowed.index(name)
            elif _index(name) is not None:
                self.input_index[name] = _index(name)
            else:
                raise ValueError(f"input '{name}' does not follow <name>__<index> naming "
                                 "convention.")
        # batch inputs: by argument name, by <name>__<index>, else after the config's
        # inputs (Triton's AddInputToMap)
        for position, name in enumerate(made, start=len(names)):
            if by_argument and name in allowed:
                self.input_index[name] = allowed.index(name)
            else:
                index = _index(name)
                self.input_index[name] = index if index is not None else position
        self.arity = len(arguments)

    def _map_outputs(self) -> None:
        if not self.outputs:
            raise ValueError("model configuration must contain at least one output, none "
                             "were specified.")
        self._check_types("output", self.outputs)
        names = [o.name for o in self.outputs]
        if all(_index(n) is not None for n in names):
            self.output_index = {n: _index(n) for n in names}
        else:
            self.output_index = {n: i for i, n in enumerate(names)}
        self.output_types = {o.name: o.data_type.removeprefix("TYPE_") for o in self.outputs}
        for state in self.states:  # always <name>__<index> (Triton)
            index = _index(state.output_name)
            if index is None:
                raise ValueError(
                    f"PyTorch model '{self.name}' is using sequence batching with state but "
                    f"state '{state.output_name}' does not follow the <name>__<index> naming "
                    "convention. ")
            self._check_type("state", state.output_name, state.data_type,
                             len(state.dims), strings_as="output")
            self.output_index.setdefault(state.output_name, index)
            self.output_types.setdefault(state.output_name,
                                         state.data_type.removeprefix("TYPE_"))

    def _check_types(self, kind: str, specs) -> None:
        """Triton's ValidateInputs / ValidateOutputs: each tensor's data type must be one
        torch has (no unsigned type but UINT8, no BF16), and a TYPE_STRING tensor (a
        List[str]) has one dimension, the batch dimension included."""
        for spec in specs:
            self._check_type(kind, spec.name, spec.data_type, len(spec.model_dims), kind)

    def _check_type(self, kind: str, name: str, data_type: str, ndims: int,
                    strings_as: str) -> None:
        """One tensor's check (`_check_types`); `ndims` without the batch dimension,
        `strings_as`: what Triton calls it in the List[str] error (a state: "output")."""
        if data_type not in _CONFIG_TYPES:
            raise ValueError(f"unsupported datatype {data_type} for {kind} '{name}' for "
                             f"model '{self.name}'")
        batching = int(self.config.get("max_batch_size", 0)) > 0
        if data_type == "TYPE_STRING" and ndims + batching > 1:
            raise ValueError("Triton only supports 1 dimensional List of String as "
                             f"{strings_as} for '{name}' for model '{self.name}'")

    def _tensor(self, name: str, array: np.ndarray):
        if array.dtype == np.object_:  # BYTES: a List[str] argument
            return [v.decode("utf-8") if isinstance(v, bytes) else str(v)
                    for v in array.reshape(-1)]
        return torch.from_numpy(array).to(self.device)

    def _run(self, inputs: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        torch._C._set_graph_executor_optimize(self.optimized)
        with torch.inference_mode(self.inference_mode), torch.no_grad():
            if self.dict_input:
                result = self.module({n: self._tensor(n, a) for n, a in inputs.items()})
            else:
                call = [None] * self.arity
                for name, array in inputs.items():
                    call[self.input_index[name]] = self._tensor(name, array)
                result = self.module(*call)
        results = list(result) if isinstance(result, (tuple, list)) and not (
            result and isinstance(result[0], str)) else [result]
        outputs = {}
        for name in names:
            index = self.output_index[name]
            if index >= len(results):
                raise ValueError(f"output tensor '{name}' is not found")
            outputs[name] = self._array(name, results[index])
        return outputs

    def _array(self, name: str, value) -> np.ndarray:
        if isinstance(value, (list, tuple)):  # List[str]
            return np.array([v.encode("utf-8") if isinstance(v, str) else v for v in value],
                            dtype=object)
        datatype = _DATATYPES.get(value.dtype, str(value.dtype))
        expected = self.output_types[name]
        if datatype != expected:
            raise ValueError(f"configuration expects datatype TYPE_{expected} for output "
                             f"'{name}', model provides TYPE_{datatype}")
        return value.detach().cpu().numpy()

    def execute(self, requests):
        return self.batcher.execute(requests)

    def sequence_terminated(self, correlation_id, reason):
        """A sequence ended without END (idle, cancelled, unload): its state goes."""
        self.batcher.drop_sequence(correlation_id)

    def finalize(self):
        self.module = None
