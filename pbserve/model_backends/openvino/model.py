"""pbserve's built-in OpenVINO backend: a Python-based backend (pbserve/model_backends)
serving models whose config says `backend: "openvino"` (or that have a `model.xml` and
no config) from `<version>/model.xml` + `model.bin` (or `default_model_filename`, any
format OpenVINO reads) on the CPU, with Triton's openvino backend semantics:
auto-complete from the model (batching from its layout), the config's data types and
dims checked against the model's, Triton's parameters (parameters.py), batching along
dimension 0 (a fixed batch dimension with ENABLE_BATCH_PADDING). See docs/backends.md.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

import triton_python_backend_utils as pb_utils
from pbserve.model_backends import missing_package_message
from pbserve.model_backends.common import Batcher

try:
    import openvino as ov
except ImportError as _error:  # the model fails to load, naming what to install
    raise ImportError(missing_package_message("openvino", "openvino", _error)) from None
import openvino.properties.hint as hints  # noqa: E402
from openvino import layout_helpers  # noqa: E402

from pbserve.model_backends.openvino.parameters import (  # noqa: E402
    OpenVINOSettings, device_properties, read_settings)
from pbserve.model_backends.openvino.tensors import (  # noqa: E402
    config_type, openvino_error, prepare_inputs, prepare_outputs, signed_shape)

DEFAULT_MODEL_FILENAME = "model.xml"
DEFAULT_MAX_BATCH_SIZE = 4  # tritonserver's --backend-config default-max-batch-size


def read_model(core: ov.Core, config: dict[str, Any]) -> ov.Model:
    """Triton's ReadModel: `<version>/<default_model_filename or model.xml>`."""
    path = os.path.join(pb_utils.get_model_dir(),
                        config.get("default_model_filename") or DEFAULT_MODEL_FILENAME)
    if not os.path.exists(path):
        raise FileNotFoundError(f"unable to find '{path}' for model '{config.get('name', '')}'")
    try:
        return core.read_model(path)
    except Exception as exc:  # noqa: BLE001 - OpenVINO's exceptions are RuntimeErrors
        raise openvino_error("reading model", exc) from None


def _has_batch(port: ov.Output) -> bool:
    return layout_helpers.has_batch(layout_helpers.get_layout(port))


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        """Triton's openvino AutoCompleteConfig: batching when the layout of every input
        and output has a batch dimension (max_batch_size 4 if the config has none, dynamic
        batching when it is above 1 and no scheduler is configured), and the inputs or
        outputs the config lacks, from the model (-1 for each variable dimension; Triton
        gives -1 for every dimension of a shape that has one, which its own check then
        refuses unless the model has no fixed dimension)."""
        config = auto_complete_model_config.as_dict()
        name = config.get("name", "")
        model = read_model(ov.Core(), config)
        max_batch_size = int(config.get("max_batch_size", 0))
        if all(_has_batch(port) for port in list(model.inputs) + list(model.outputs)):
            if max_batch_size == 0:
                max_batch_size = DEFAULT_MAX_BATCH_SIZE
                auto_complete_model_config.set_max_batch_size(max_batch_size)
                pb_utils.Logger.log_warn(
                    f"autofilled max_batch_size to {max_batch_size} for model '{name}' since "
                    "batching is supported but no max_batch_size is specified in model "
                    "configuration. Must specify max_batch_size to utilize autofill with a "
                    "larger max batch size")
            if max_batch_size > 1 and "dynamic_batching" not in config \
                    and "sequence_batching" not in config:
                auto_complete_model_config.set_dynamic_batching()
        elif max_batch_size != 0:
            pb_utils.Logger.log_warn(
                f"model layout for model {name} does not support batching while non-zero "
                "max_batch_size is specified")
        for kind, ports, add in (("input", model.inputs, auto_complete_model_config.add_input),
                                 ("output", model.outputs,
                                  auto_complete_model_config.add_output)):
            if config.get(kind):
                pb_utils.Logger.log_info(f"skipping {kind} model configuration auto-complete "
                                         f"for '{name}': {kind} already specified")
                continue
            for port in ports:
                dims = signed_shape(port.get_partial_shape())
                add({"name": port.get_any_name(),
                     "data_type": config_type(port.get_element_type()),
                     "dims": dims[1:] if max_batch_size > 0 else dims})
        return auto_complete_model_config

    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.name = args["model_name"]
        if args.get("model_instance_kind") not in (None, "", "CPU"):
            raise ValueError(f"unable to load model '{self.name}', Triton OpenVINO backend "
                             "supports only Kind CPU and AUTO")
        self.settings = read_settings(self.config)
        core = ov.Core()
        if self.settings.cpu_extension_path:
            try:
                core.add_extension(self.settings.cpu_extension_path)
            except Exception as exc:  # noqa: BLE001
                raise openvino_error(" loading custom CPU extensions", exc) from None
        model = prepare_inputs(read_model(core, self.config), self.config, self.name,
                               self.settings.reshape_io_layers)
        self.fixed_batch = self._fixed_batch(model)
        model = prepare_outputs(model, self.config, self.name)
        self.request = self._compile(core, model).create_infer_request()
        self.batcher = Batcher(self.config, self._run, str)

    def _fixed_batch(self, model: ov.Model) -> int:
        """With batching, a model whose batch dimension is variable runs any batch as it
        is; one whose batch dimension is fixed (or with SKIP_OV_DYNAMIC_BATCHSIZE) gets
        max_batch_size as its batch (Triton's set_batch), which each batch must fill
        unless ENABLE_BATCH_PADDING. 0: no fixed batch."""
        max_batch_size = int(self.config.get("max_batch_size", 0))
        if max_batch_size <= 0:
            return 0
        variable = all(len(p.get_partial_shape()) and p.get_partial_shape()[0].is_dynamic
                       for p in model.inputs)
        if variable and not self.settings.skip_dynamic_batch_size:
            return 0
        try:
            ov.set_batch(model, max_batch_size)
        except Exception as exc:  # noqa: BLE001
            raise openvino_error("setting max batch size", exc) from None
        return max_batch_size

    def _compile(self, core: ov.Core, model: ov.Model):
        settings: OpenVINOSettings = self.settings
        device = settings.target_device
        properties = device_properties(self.config)
        try:
            if properties:
                core.set_property(device, properties)
        except Exception as exc:  # noqa: BLE001
            raise openvino_error("configuring openvino core", exc) from None
        auto_batching = int(self.config.get("max_batch_size", 0)) != 0 \
            and not settings.skip_dynamic_batch_size
        try:
            return core.compile_model(model, device,
                                      {hints.allow_auto_batching(): auto_batching})
        except Exception as exc:  # noqa: BLE001
            raise openvino_error("loading model", exc) from None

    def _run(self, inputs: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        size = next(iter(inputs.values())).shape[0] if self.fixed_batch else 0
        if self.fixed_batch and size != self.fixed_batch:
            if not self.settings.enable_batch_padding:
                raise ValueError(
                    f"expected requests with batch size '{self.fixed_batch}', got '{size}'... "
                    "this error can be avoided by setting 'ENABLE_BATCH_PADDING' parameter "
                    "in model configuration to 'YES' at a performance cost.")
            inputs = {name: _pad(array, self.fixed_batch) for name, array in inputs.items()}
        try:
            for name, array in inputs.items():
                self.request.set_tensor(
                    name, ov.Tensor(np.ascontiguousarray(array), shared_memory=True))
        except Exception as exc:  # noqa: BLE001
            raise openvino_error("setting tensor data", exc) from None
        try:
            self.request.start_async()
            self.request.wait()
        except Exception as exc:  # noqa: BLE001
            raise openvino_error("running async inference", exc) from None
        outputs = {}
        for name in names:
            data = self.request.get_tensor(name).data
            outputs[name] = np.array(data[:size] if size else data)  # a copy: OV reuses it
        return outputs

    def execute(self, requests):
        return self.batcher.execute(requests)

    def finalize(self):
        self.request = None


def _pad(array: np.ndarray, batch: int) -> np.ndarray:
    """ENABLE_BATCH_PADDING: zeros after the requests' items, up to the fixed batch."""
    padded = np.zeros((batch,) + array.shape[1:], array.dtype)
    padded[:array.shape[0]] = array
    return padded
