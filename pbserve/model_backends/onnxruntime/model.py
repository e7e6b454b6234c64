"""pbserve's built-in ONNX Runtime backend: a Python-based backend (pbserve/model_backends)
serving models whose config says `backend: "onnxruntime"` or `platform:
"onnxruntime_onnx"` (or that have a `model.onnx` and no config) from
`<version>/model.onnx` (or `default_model_filename`), with Triton's onnxruntime backend
semantics: auto-complete from the graph, batching along dimension 0, BYTES as object
arrays, the session options of Triton's parameters, the CUDA provider for KIND_GPU
instances when onnxruntime-gpu is installed, the sequence batcher's control inputs and
implicit state. See docs/backends.md.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np

import triton_python_backend_utils as pb_utils
from pbserve.model_backends import missing_package_message
from pbserve.model_backends.common import (
    Batcher, compare_dims, control_specs, int_parameter, log_instance_device, shape_string,
    tensor_specs)
from pbserve.model_backends.implicit_state import state_specs
from pbserve.model_backends.ragged import batch_input_targets

try:
    import onnxruntime as ort
except ImportError as _error:  # the model fails to load, naming what to install
    raise ImportError(missing_package_message("onnxruntime", "onnxruntime", _error)) from None

# ONNX Runtime's type strings -> config data types
_CONFIG_TYPES = {
    "tensor(bool)": "TYPE_BOOL", "tensor(uint8)": "TYPE_UINT8", "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32", "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8", "tensor(int16)": "TYPE_INT16", "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64", "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32", "tensor(double)": "TYPE_FP64",
    "tensor(bfloat16)": "TYPE_BF16", "tensor(string)": "TYPE_STRING",
}
# the config data types Triton's onnxruntime backend takes (ModelConfigDataTypeToOnnxDataType,
# 2.51): every one but TYPE_BF16
_LOADABLE_TYPES = frozenset(_CONFIG_TYPES.values()) - {"TYPE_BF16"}
DEFAULT_MAX_BATCH_SIZE = 4  # tritonserver's --backend-config default-max-batch-size
_ORT_ERROR = re.compile(r"^\[ONNXRuntimeError\] : (\d+) : \w+ : (.*)$", re.S)


def _model_file(config: dict[str, Any]) -> str:
    path = os.path.join(pb_utils.get_model_dir(),
                        config.get("default_model_filename") or "model.onnx")
    if os.path.isdir(path):  # a folder holding the graph and its external data
        path = os.path.join(path, "model.onnx")
    return path


def _dims(shape: list) -> list[int]:
    """ONNX Runtime's shape: a symbolic or unknown dimension is -1 for Triton."""
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


def _io(args) -> dict[str, tuple[str, list[int]]]:
    return {a.name: (_CONFIG_TYPES.get(a.type, a.type), _dims(a.shape)) for a in args}


def describe(exc: BaseException) -> str:
    """Triton's words for an ONNX Runtime failure: `onnx runtime error <code>: <text>`."""
    text = str(exc)
    match = _ORT_ERROR.match(text)
    if match:
        return f"onnx runtime error {match.group(1)}: {match.group(2)}"
    return text


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        """Triton's onnxruntime AutoCompleteConfig: nothing when the config names both
        inputs and outputs; otherwise max_batch_size (the default, 4, when every tensor
        has a variable first dimension; dynamic batching then too) and the tensors it
        lacks, from the graph."""
        config = auto_complete_model_config.as_dict()
        if config.get("input") and config.get("output"):
            return auto_complete_model_config
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(_model_file(config), options,
                                       providers=["CPUExecutionProvider"])
        inputs, outputs = _io(session.get_inputs()), _io(session.get_outputs())
        name = config.get("name", "")
        batching = all(dims and dims[0] == -1
                       for _, dims in list(inputs.values()) + list(outputs.values()))
        max_batch_size = int(config.get("max_batch_size", 0))
        if batching:
            if max_batch_size == 0:
                max_batch_size = DEFAULT_MAX_BATCH_SIZE
                auto_complete_model_config.set_max_batch_size(max_batch_size)
                pb_utils.Logger.log_warn(
                    f"autofilled max_batch_size to {max_batch_size} for model '{name}' since "
                    "batching is supporrted but no max_batch_size is specified in model "
                    "configuration. Must specify max_batch_size to utilize autofill with a "
                    "larger max batch size")
            if max_batch_size > 1 and "sequence_batching" not in config:
                auto_complete_model_config.set_dynamic_batching()
        elif max_batch_size != 0:
            raise ValueError(f"autofill failed for model '{name}': model does not support "
                             "batching while non-zero max_batch_size is specified")
        # the sequence batcher's control tensors and the implicit state are graph inputs
        # (and outputs) that are not the config's
        sequence = {c.name for c in control_specs(config)}
        for state in config.get("sequence_batching", {}).get("state", []):
            sequence.update((state.get("input_name"), state.get("output_name")))
        for kind, infos, add in (("input", inputs, auto_complete_model_config.add_input),
                                 ("output", outputs, auto_complete_model_config.add_output)):
            if config.get(kind):
                continue
            for tensor, (data_type, dims) in infos.items():
                if tensor in sequence:
                    continue
                dims = dims[1:] if max_batch_size > 0 else dims
                add({"name": tensor, "data_type": data_type, "dims": dims or [1]})
                if not dims and max_batch_size > 0:  # a scalar per batch item
                    config[kind][-1]["reshape"] = {"shape": []}
        return auto_complete_model_config

    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.name = args["model_name"]
        self.session = ort.InferenceSession(_model_file(self.config), self._options(),
                                            providers=self._providers(args))
        log_instance_device(args, "CUDAExecutionProvider" in self.session.get_providers(),
                            int(args.get("model_instance_device_id") or 0))
        states = state_specs(self.config)
        self.batcher = Batcher(self.config, self._run, describe, states,
                               args.get("model_repository", ""))
        self._validate()
        self.strings = {i.name for i in tensor_specs(self.config, "input")
                        if i.data_type == "TYPE_STRING"}
        self.strings.update(s.input_name for s in states if s.data_type == "TYPE_STRING")

    def _options(self):
        options = ort.SessionOptions()
        level = int(self.config.get("optimization", {}).get("graph", {}).get("level", 0))
        options.graph_optimization_level = {
            -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        }.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        intra = int_parameter(self.config, "intra_op_thread_count")
        if intra > 0:
            options.intra_op_num_threads = intra
        inter = int_parameter(self.config, "inter_op_thread_count")
        if inter > 0:
            options.inter_op_num_threads = inter
        if int_parameter(self.config, "execution_mode") == 1:
            options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        return options

    def _providers(self, args) -> list:
        if args.get("model_instance_kind") == "GPU":
            if "CUDAExecutionProvider" in ort.get_available_providers():
                device = int(args.get("model_instance_device_id", "0") or 0)
                return [("CUDAExecutionProvider", {"device_id": device}),
                        "CPUExecutionProvider"]
            pb_utils.Logger.log_warn(
                f"model '{self.name}': KIND_GPU instance, but this onnxruntime has no CUDA "
                "execution provider (pip install onnxruntime-gpu): running on the CPU")
        return ["CPUExecutionProvider"]

    def _validate(self) -> None:
        """Triton's ValidateInputs / ValidateOutputs: the config's tensors against the
        graph's (names, data types, shapes); a data type the backend does not take
        (TYPE_BF16) fails before it is compared with the graph's."""
        max_batch_size = int(self.config.get("max_batch_size", 0))
        inputs, outputs = _io(self.session.get_inputs()), _io(self.session.get_outputs())
        specs = tensor_specs(self.config, "input")
        controls = control_specs(self.config)
        for control in controls:
            self._validate_control(control.name, control.data_type, inputs, max_batch_size)
        states = self.config.get("sequence_batching", {}).get("state", [])
        made = batch_input_targets(self.config)
        expected = len(specs) + len(controls) + len(states) + len(made)
        if len(inputs) != expected:
            raise ValueError(f"unable to load model '{self.name}', configuration expects "
                             f"{expected} inputs, model provides {len(inputs)}")
        for kind, found, specs in (("input", inputs, specs),
                                   ("output", outputs, tensor_specs(self.config, "output"))):
            for spec in specs:
                if kind == "input" and spec.optional and max_batch_size != 0:
                    raise ValueError(
                        f"unable to load model '{self.name}', optional input '{spec.name}' "
                        "is not supported for models that support batching")
                if spec.name not in found:
                    raise ValueError(f"unexpected inference {kind} '{spec.name}', allowed "
                                     f"{kind}s are: {', '.join(sorted(found))}")
                data_type, shape = found[spec.name]
                if spec.data_type not in _LOADABLE_TYPES:
                    raise ValueError(f"unsupported datatype {spec.data_type} for {kind} "
                                     f"'{spec.name}' for model '{self.name}'")
                if data_type != spec.data_type:
                    raise ValueError(
                        f"unable to load model '{self.name}', configuration expects datatype "
                        f"{spec.data_type} for {kind} '{spec.name}', model provides "
                        f"{data_type}")
                if kind == "input" and spec.name in self.batcher.ragged:
                    self._validate_ragged(spec.name, spec.optional, shape)
                elif shape and spec.name not in self.batcher.scattered:
                    compare_dims(self.name, spec.name, shape, spec.model_dims, max_batch_size)
        for state in states:
            for kind, key, found in (("input", "input_name", inputs),
                                     ("output", "output_name", outputs)):
                name, data_type = state.get(key, ""), state.get("data_type", "TYPE_INVALID")
                if name not in found:
                    raise ValueError(f"unexpected inference {kind} state '{name}', allowed "
                                     f"{kind}s are: {', '.join(sorted(found))}")
                if data_type not in _LOADABLE_TYPES:
                    raise ValueError(f"unsupported datatype {data_type} for {kind} state "
                                     f"'{name}' for model '{self.name}'")
                if found[name][0] != data_type:
                    raise ValueError(
                        f"unable to load model '{self.name}', configuration expects datatype "
                        f"{data_type} for {kind} state '{name}', model provides "
                        f"{found[name][0]}")

    def _validate_ragged(self, name: str, optional: bool, shape: list[int]) -> None:
        """Triton's check of a ragged input: the graph takes it as one [-1] tensor."""
        if optional:
            raise ValueError(f"unable to load model '{self.name}', configuration expects "
                             f"model provides input with shape [-1] for ragged input "
                             f"'{name}', which is not supported for optional input")
        if shape != [-1]:
            raise ValueError(f"unable to load model '{self.name}', configuration expects "
                             f"model provides input with shape [-1]  for ragged input "
                             f"'{name}', model provides {shape_string(shape)}")

    def _validate_control(self, name: str, data_type: str,
                          inputs: dict[str, tuple[str, list[int]]],
                          max_batch_size: int) -> None:
        """Triton's Validate{Boolean,Typed}SequenceControl: the graph has the control
        input, of dims [1] past the batch dimension and of the config's data type."""
        if name not in inputs:
            raise ValueError(f"configuration specified sequence control '{name}', but model "
                             "does not provide that input")
        graph_type, shape = inputs[name]
        debatched = shape[1:] if max_batch_size > 0 else shape
        if len(debatched) != 1 or debatched[0] not in (1, -1):
            raise ValueError(f"unable to load model '{self.name}', sequence control '{name}' "
                             f"in model has dims {shape_string(debatched)} but dims [1] is "
                             "expected")
        if graph_type != data_type:
            raise ValueError(f"unable to load model '{self.name}', sequence control '{name}', "
                             f"the model expects data-type {graph_type} but the model "
                             f"configuration specifies data-type {data_type}")

    def _run(self, inputs: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        feed = {}
        for name, array in inputs.items():
            if name in self.strings:  # ONNX Runtime takes str, not bytes
                array = np.vectorize(_text, otypes=[object])(array) if array.size \
                    else array.astype(object)
            feed[name] = array
        results = self.session.run(names, feed)
        return dict(zip(names, results))

    def execute(self, requests):
        return self.batcher.execute(requests)

    def sequence_terminated(self, correlation_id, reason):
        """A sequence ended without END (idle, cancelled, unload): its state goes."""
        self.batcher.drop_sequence(correlation_id)

    def finalize(self):
        self.session = None


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)
