"""An OpenVINO model's inputs and outputs against its config, as Triton's openvino backend
checks them (ValidateInputs / ValidateOutputs, CompareDimsSupported): names, the data
types it takes (the config's type is the tensor's type: OpenVINO converts to and from
the model's own), dims, `RESHAPE_IO_LAYERS`. Imported by the openvino backend's model.py
only, after openvino itself.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import openvino as ov
from openvino.preprocess import PrePostProcessor

from pbserve.model_backends.common import TensorSpec, dims_mismatch, tensor_specs

# config data types <-> OpenVINO element types (Triton's ModelConfigDataTypeToOpenVINOElement
# and OpenVINOElementToModelConfigDataType: no FP64, BF16 or STRING)
ELEMENTS = {
    "TYPE_BOOL": ov.Type.boolean, "TYPE_UINT8": ov.Type.u8, "TYPE_UINT16": ov.Type.u16,
    "TYPE_UINT32": ov.Type.u32, "TYPE_UINT64": ov.Type.u64, "TYPE_INT8": ov.Type.i8,
    "TYPE_INT16": ov.Type.i16, "TYPE_INT32": ov.Type.i32, "TYPE_INT64": ov.Type.i64,
    "TYPE_FP16": ov.Type.f16, "TYPE_FP32": ov.Type.f32,
}
CONFIG_TYPES = {element: data_type for data_type, element in ELEMENTS.items()}
_LOCATION = re.compile(r"^(Exception from \S+:\d+:|Check '.*' failed at \S+:\d+:)$")


def openvino_error(what: str, exc: BaseException) -> RuntimeError:
    """Triton's words for an OpenVINO failure, `openvino error in <what> : <text>`, the
    text without OpenVINO's source locations."""
    lines = [line.strip() for line in str(exc).splitlines()]
    text = " ".join(line for line in lines if line and not _LOCATION.match(line))
    return RuntimeError(f"openvino error in {what} : {text or type(exc).__name__}")


def config_type(element: ov.Type) -> str:
    return CONFIG_TYPES.get(element, "TYPE_INVALID")


def signed_shape(shape: ov.PartialShape) -> list[int]:
    """Triton's ConvertToSignedShape: a variable dimension is -1."""
    return [d.get_length() if d.is_static else -1 for d in shape]


def port_names(ports: Sequence[ov.Output]) -> dict[str, ov.Output]:
    """Every name of every port (a tensor may have several), to its port."""
    return {name: port for port in ports for name in port.get_names()}


def _allowed(kind: str, name: str, ports: Sequence[ov.Output]) -> ValueError:
    """backend_common's CheckAllowedModelInput/Output."""
    allowed = ", ".join(sorted(p.get_any_name() for p in ports))
    return ValueError(f"unexpected inference {kind} '{name}', allowed {kind}s are: {allowed}")


def _supported_element(model_name: str, kind: str, spec: TensorSpec) -> ov.Type:
    element = ELEMENTS.get(spec.data_type)
    if element is None:
        raise ValueError(f"unsupported datatype {spec.data_type} for {kind} '{spec.name}' for "
                         f"model '{model_name}'")
    return element


def prepare_inputs(model: ov.Model, config: dict[str, Any], model_name: str,
                   reshape_io_layers: bool) -> ov.Model:
    """ValidateInputs: the config's inputs are the model's (count, names, supported data
    types, dims; with RESHAPE_IO_LAYERS the model takes the config's dims instead), and
    the model takes each input in the config's data type (and layout N... when batching)."""
    max_batch_size = int(config.get("max_batch_size", 0))
    specs = tensor_specs(config, "input")
    if len(model.inputs) != len(specs):
        raise ValueError(f"unable to load model '{model_name}', configuration expects "
                         f"{len(specs)} inputs, model provides {len(model.inputs)}")
    ports = port_names(model.inputs)
    new_shapes: dict[str, ov.PartialShape] = {}
    for spec in specs:
        if spec.name not in ports:
            raise _allowed("input", spec.name, model.inputs)
        _supported_element(model_name, "input", spec)
        shape = ports[spec.name].get_partial_shape()
        if reshape_io_layers:
            new_shapes[spec.name] = _config_shape(shape, spec.model_dims, max_batch_size)
        else:
            compare_dims(model_name, spec.name, shape, spec.model_dims, max_batch_size,
                         exact=False)
    if new_shapes:
        try:
            model.reshape(new_shapes)
        except Exception as exc:  # noqa: BLE001 - OpenVINO's exceptions are RuntimeErrors
            raise openvino_error(f"setting shape for {', '.join(new_shapes)}", exc) from None
    ppp = PrePostProcessor(model)
    for spec in specs:
        tensor = ppp.input(spec.name).tensor()
        tensor.set_element_type(ELEMENTS[spec.data_type])
        if max_batch_size:
            tensor.set_layout(ov.Layout("N..."))
    try:
        return ppp.build()
    except Exception as exc:  # noqa: BLE001
        raise openvino_error("apply model input preprocessing", exc) from None


def _config_shape(shape: ov.PartialShape, dims: Sequence[int],
                  max_batch_size: int) -> ov.PartialShape:
    """RESHAPE_IO_LAYERS: the model's batch dimension (when batching), then the config's."""
    if any(d < -1 or d == 0 for d in dims):
        raise ValueError("openvino backend does not support dimensions values other than "
                         "`-1` or positive integers")
    batch = [shape[0]] if max_batch_size and len(shape) else []
    return ov.PartialShape(batch + [ov.Dimension(d) for d in dims])


def prepare_outputs(model: ov.Model, config: dict[str, Any], model_name: str) -> ov.Model:
    """ValidateOutputs: each config output is a model output of a supported data type and
    of exactly the config's dims; the model gives it in the config's data type."""
    max_batch_size = int(config.get("max_batch_size", 0))
    ports = port_names(model.outputs)
    ppp = PrePostProcessor(model)
    for spec in tensor_specs(config, "output"):
        if spec.name not in ports:
            raise _allowed("output", spec.name, model.outputs)
        element = _supported_element(model_name, "output", spec)
        ppp.output(spec.name).tensor().set_element_type(element)
        compare_dims(model_name, spec.name, ports[spec.name].get_partial_shape(),
                     spec.model_dims, max_batch_size, exact=True)
    try:
        return ppp.build()
    except Exception as exc:  # noqa: BLE001
        raise openvino_error("apply model output preprocessing", exc) from None


def _matches(dim: ov.Dimension, config_dim: int) -> bool:
    """Triton's doesMatch: a static dimension is equal; a variable one matches anything
    within its bounds."""
    if dim.is_static:
        return dim.get_length() == config_dim
    upper = dim.get_max_length()
    return upper < 0 or dim.get_min_length() <= config_dim <= upper


def compare_dims(model_name: str, tensor_name: str, shape: ov.PartialShape,
                 dims: Sequence[int], max_batch_size: int, exact: bool) -> None:
    """Triton's openvino CompareDimsSupported: with batching the batch dimension (and for
    an input, a -1 in the config) is not compared; ValueError in Triton's words."""
    model_shape = signed_shape(shape)
    if max_batch_size > 0:
        if not model_shape:
            raise ValueError(f"model '{model_name}', tensor '{tensor_name}': for the model to "
                             "support batching the shape should have at least 1 dimension")
        full = [max_batch_size, *dims]
        same = len(model_shape) == len(full) and all(
            _matches(shape[i], d) for i, d in enumerate(full)
            if exact or (i != 0 and d != -1))
        if not same:
            raise dims_mismatch(model_name, tensor_name, model_shape, full, batched=True)
    elif len(model_shape) != len(dims) or not all(
            _matches(shape[i], d) for i, d in enumerate(dims)):
        raise dims_mismatch(model_name, tensor_name, model_shape, dims, batched=False)
