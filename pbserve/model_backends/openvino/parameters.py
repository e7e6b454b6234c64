"""The `parameters` of an OpenVINO model's config, read as Triton's openvino backend reads
them (ParseParameters): YES/NO switches, the target device, the CPU extension library,
and the device properties (threads, streams, hints) in Triton's words when a value is
wrong. Imported by the openvino backend's model.py only, after openvino itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import openvino as ov
import openvino.properties as props
import openvino.properties.hint as hints

from pbserve.model_backends.common import parameter

# the device properties Triton's backend reads, in its order
DEVICE_KEYS = ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS", "HINT_BF16",
               "NUM_STREAMS", "PERFORMANCE_HINT")
_MODES = {"latency": hints.PerformanceMode.LATENCY,
          "throughput": hints.PerformanceMode.THROUGHPUT,
          "cumulative_throughput": hints.PerformanceMode.CUMULATIVE_THROUGHPUT}


@dataclass
class OpenVINOSettings:
    """What the config's parameters ask of the backend."""
    skip_dynamic_batch_size: bool = False  # SKIP_OV_DYNAMIC_BATCHSIZE
    enable_batch_padding: bool = False  # ENABLE_BATCH_PADDING
    reshape_io_layers: bool = False  # RESHAPE_IO_LAYERS
    target_device: str = "CPU"  # TARGET_DEVICE
    cpu_extension_path: str = ""  # CPU_EXTENSION_PATH


def read_settings(config: dict[str, Any]) -> OpenVINOSettings:
    """The settings of `config`'s parameters but the device properties (Triton's
    ParseParameters(), before the model is read)."""
    return OpenVINOSettings(
        skip_dynamic_batch_size=_yes(config, "SKIP_OV_DYNAMIC_BATCHSIZE"),
        enable_batch_padding=_yes(config, "ENABLE_BATCH_PADDING"),
        reshape_io_layers=_yes(config, "RESHAPE_IO_LAYERS"),
        target_device=parameter(config, "TARGET_DEVICE").upper() or "CPU",
        cpu_extension_path=parameter(config, "CPU_EXTENSION_PATH"))


def device_properties(config: dict[str, Any]) -> dict[str, Any]:
    """The OpenVINO properties of the device parameters (Triton's ParseParameters(device),
    after the model is checked); ValueError in Triton's words for a wrong value."""
    properties = {}
    for key in DEVICE_KEYS:
        value = parameter(config, key)
        if value:
            name, setting = device_property(key, value)
            properties[name] = setting
    return properties


def _yes(config: dict[str, Any], key: str) -> bool:
    """Triton's ParseBoolParameter: only "yes" (any case) turns a switch on."""
    return parameter(config, key).lower() == "yes"


def device_property(key: str, value: str) -> tuple[str, Any]:
    """Triton's ParseParameterHelper: the OpenVINO property a parameter sets."""
    text = value.lower()
    if key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
        if not text.isdigit():
            raise ValueError(f"expected the parameter '{key}' to be a non-negative number, "
                             f"got {text}")
        name = props.inference_num_threads() if key == "INFERENCE_NUM_THREADS" \
            else props.compilation_num_threads()
        return name, int(text)
    if key == "HINT_BF16":
        if text != "yes":
            raise ValueError(f"expected the parameter '{key}' to be YES, got {text}")
        return hints.inference_precision(), ov.Type.bf16
    if key == "NUM_STREAMS":
        if text == "auto":
            return props.streams.num(), props.streams.Num.AUTO
        if text == "numa":
            return props.streams.num(), props.streams.Num.NUMA
        if text.isdigit():
            return props.streams.num(), props.streams.Num(int(text))
        raise ValueError(f"expected the parameter '{key}' to be either AUTO/NUMA/<int_value>, "
                         f"got {text}")
    if key == "PERFORMANCE_HINT":
        if text not in _MODES:
            raise ValueError(f"expected the parameter '{key}' to be "
                             f"LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got {text}")
        return hints.performance_mode(), _MODES[text]
    raise ValueError(f"the parameter '{key}' is not yet supported by openvino backend")
