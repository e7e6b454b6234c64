"""A model's config.pbtxt as Triton's own `ModelConfig` protobuf, and its JSON faces.

The message type is Triton's (`tritonclient.grpc.model_config_pb2`), parsed with
protobuf's `text_format` exactly as Triton's ReadTextProto does, so every field,
enum name and syntax quirk Triton accepts is accepted here too. The JSON produced
for `/v2/models/{m}/config` and for the stub's `args["model_config"]` is Triton's
ModelConfigToJson: proto field names, every field with no presence printed even at
its default, enums by name, and the same int64 fields turned from strings into
numbers. What Triton fills in and checks while loading lives in `config_checks`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2 as mc

from pbserve import model_backends
from pbserve.core.config import config_checks
from pbserve.errors import ErrorCode, ServerError, invalid_arg

ModelConfig = mc.ModelConfig

CONFIG_FILENAME = "config.pbtxt"
PYTHON_BACKEND = "python"
PYTHON_MODEL_FILENAME = "model.py"

# Triton's DataTypeToProtocolString / ProtocolStringToDataType.
_PROTOCOL_NAMES = {
    mc.TYPE_BOOL: "BOOL",
    mc.TYPE_UINT8: "UINT8",
    mc.TYPE_UINT16: "UINT16",
    mc.TYPE_UINT32: "UINT32",
    mc.TYPE_UINT64: "UINT64",
    mc.TYPE_INT8: "INT8",
    mc.TYPE_INT16: "INT16",
    mc.TYPE_INT32: "INT32",
    mc.TYPE_INT64: "INT64",
    mc.TYPE_FP16: "FP16",
    mc.TYPE_FP32: "FP32",
    mc.TYPE_FP64: "FP64",
    mc.TYPE_STRING: "BYTES",
    mc.TYPE_BF16: "BF16",
}
_CONFIG_TYPES = {name: dtype for dtype, name in _PROTOCOL_NAMES.items()}
_CONFIG_TYPE_NAMES = dict(mc.DataType.items())  # "TYPE_FP32" -> 11
INVALID_DATATYPE = "<invalid>"  # what Triton prints for a type it does not know

# Bytes per element of each protocol datatype; BYTES is variable (Triton says 0).
ELEMENT_SIZE: dict[str, int] = {
    "BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8,
    "INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8,
    "FP16": 2, "FP32": 4, "FP64": 8, "BF16": 2, "BYTES": 0,
}

# The int64/uint64 fields Triton's ModelConfigToJson turns back into JSON numbers
# ("[]" walks a list, "{}" the values of a map). Protobuf's JSON writes 64-bit ints
# as strings; Triton fixes exactly these paths and leaves the rest (map keys,
# sequence_batching.state.initial_state.dims, cuda graph dims, secondary device
# ids) as strings, so we do too.
_INT64_NUMBER_PATHS: tuple[tuple[str, ...], ...] = (
    ("input", "[]", "dims"),
    ("input", "[]", "reshape", "shape"),
    ("output", "[]", "dims"),
    ("output", "[]", "reshape", "shape"),
    ("version_policy", "specific", "versions"),
    ("dynamic_batching", "max_queue_delay_microseconds"),
    ("dynamic_batching", "priority_levels"),
    ("dynamic_batching", "default_priority_level"),
    ("dynamic_batching", "default_queue_policy", "default_timeout_microseconds"),
    ("dynamic_batching", "priority_queue_policy", "{}", "default_timeout_microseconds"),
    ("sequence_batching", "max_sequence_idle_microseconds"),
    ("sequence_batching", "oldest", "max_queue_delay_microseconds"),
    ("sequence_batching", "direct", "max_queue_delay_microseconds"),
    ("sequence_batching", "state", "[]", "dims"),
    ("ensemble_scheduling", "step", "[]", "model_version"),
    ("model_warmup", "[]", "inputs", "{}", "dims"),
)


# ---------------------------------------------------------------------------
# reading and writing
# ---------------------------------------------------------------------------

def read_model_config(model_dir: Path) -> ModelConfig:
    """Parse `<model_dir>/config.pbtxt`; a missing file is an empty config, as with
    Triton's default auto-complete (the backend and defaults fill it in later)."""
    path = Path(model_dir) / CONFIG_FILENAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ModelConfig()
    except (OSError, UnicodeDecodeError) as exc:
        raise invalid_arg(f"failed to read text proto from {path}: {exc}") from None
    return parse_model_config(text, str(path))


def parse_model_config(text: str, source: str = CONFIG_FILENAME) -> ModelConfig:
    """Parse config.pbtxt text; errors name `source` like Triton's ReadTextProto,
    followed by protobuf's own description (line:column and what was wrong)."""
    try:
        return text_format.Parse(text, ModelConfig())
    except text_format.ParseError as exc:
        raise invalid_arg(f"failed to read text proto from {source}: {exc}") from None


def config_to_dict(cfg: ModelConfig) -> dict[str, Any]:
    """The config as Triton's `/v2/models/{m}/config` prints it (ModelConfigToJson)."""
    raw = json_format.MessageToDict(
        cfg, always_print_fields_with_no_presence=True, preserving_proto_field_name=True)
    out = _as_triton_prints(ModelConfig.DESCRIPTOR, raw)
    for path in _INT64_NUMBER_PATHS:
        _numbers_at(out, path)
    return out


def config_to_json(cfg: ModelConfig) -> str:
    """`config_to_dict` as compact JSON text (what `initialize(args)` receives)."""
    return json.dumps(config_to_dict(cfg), separators=(",", ":"))


def config_from_dict(d: dict[str, Any]) -> ModelConfig:
    """Triton's JsonToModelConfig: ints may be numbers or strings, unknown fields
    are an INVALID_ARG error (used for load-with-config and auto-complete)."""
    if not isinstance(d, dict):
        raise invalid_arg(f"model configuration must be a JSON object, got {type(d).__name__}")
    try:
        return json_format.ParseDict(d, ModelConfig(), ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise invalid_arg(str(exc)) from None


def config_from_json(s: str | bytes) -> ModelConfig:
    """`config_from_dict` of JSON text."""
    try:
        d = json.loads(s)
    except RecursionError:
        raise invalid_arg("failed to parse model configuration JSON: nested too "
                          "deeply") from None
    except ValueError as exc:
        raise invalid_arg(f"failed to parse model configuration JSON: {exc}") from None
    return config_from_dict(d)


def _as_triton_prints(desc: Descriptor, d: dict[str, Any]) -> dict[str, Any]:
    """Reorder keys into field-number order (C++ prints them so; Python puts defaults
    last) and print integral floats as integers as C++ does ("1", not "1.0")."""
    out: dict[str, Any] = {}
    for field in desc.fields:
        if field.name not in d:
            continue
        value = d[field.name]
        message = field.message_type
        if message is not None and message.GetOptions().map_entry:
            value_field = message.fields_by_name["value"]
            if value_field.message_type is not None:
                value = {k: _as_triton_prints(value_field.message_type, v)
                         for k, v in value.items()}
        elif message is not None:
            if isinstance(value, list):  # repeated message
                value = [_as_triton_prints(message, v) for v in value]
            else:
                value = _as_triton_prints(message, value)
        elif field.cpp_type in (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE):
            value = [_c_float(v) for v in value] if isinstance(value, list) else _c_float(value)
        out[field.name] = value
    return out


def _c_float(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _numbers_at(node: Any, path: tuple[str, ...]) -> None:
    """Turn the int64 strings at `path` under `node` into ints (in place)."""
    step, rest = path[0], path[1:]
    if step == "[]" or step == "{}":
        items = node if step == "[]" else node.values()
        for item in items:
            _numbers_at(item, rest)
        return
    if not isinstance(node, dict) or step not in node:
        return
    if rest:
        _numbers_at(node[step], rest)
        return
    value = node[step]
    node[step] = [int(v) for v in value] if isinstance(value, list) else int(value)


# ---------------------------------------------------------------------------
# datatypes, metadata
# ---------------------------------------------------------------------------

def datatype_of(config_type: int | str) -> str:
    """Protocol datatype of a config data_type: TYPE_FP32 -> "FP32", TYPE_STRING ->
    "BYTES"; Triton's "<invalid>" for TYPE_INVALID or an unknown value."""
    if isinstance(config_type, str):
        config_type = _CONFIG_TYPE_NAMES.get(config_type, -1)
    return _PROTOCOL_NAMES.get(config_type, INVALID_DATATYPE)


def config_type_of(datatype: str) -> int:
    """Config data_type enum value of a protocol datatype ("BYTES" -> TYPE_STRING);
    TYPE_INVALID for a name Triton does not know."""
    return _CONFIG_TYPES.get(datatype, mc.TYPE_INVALID)


def is_decoupled(cfg: ModelConfig) -> bool:
    """Whether the model may send any number of responses per request."""
    return cfg.model_transaction_policy.decoupled


def model_metadata(cfg: ModelConfig, versions: Iterable[str]) -> dict[str, Any]:
    """KServe v2 model metadata as Triton builds it (TRITONSERVER_ServerModelMetadata):
    the platform is the backend when none is set, shapes are config dims with a
    leading -1 when the model batches."""
    batch_dim = [-1] if cfg.max_batch_size >= 1 else []

    def tensors(ios: Iterable[Any]) -> list[dict[str, Any]]:
        return [{"name": io.name, "datatype": datatype_of(io.data_type),
                 "shape": batch_dim + [int(d) for d in io.dims]} for io in ios]

    return {
        "name": cfg.name,
        "versions": [str(v) for v in versions],
        "platform": cfg.platform or cfg.backend,
        "inputs": tensors(cfg.input),
        "outputs": tensors(cfg.output),
    }


# ---------------------------------------------------------------------------
# what Triton fills in and checks while loading a Python model
# ---------------------------------------------------------------------------

def complete_defaults(cfg: ModelConfig, model_name: str, model_path: Path | None = None,
                      *, gpus: Iterable[int] = (), check_io: bool = True,
                      backend_directory: Path = Path(model_backends.DEFAULT_BACKEND_DIRECTORY)
                      ) -> ModelConfig:
    """A copy of `cfg` completed and checked the way Triton does before the Python
    backend sees it: GetNormalizedModelConfig, ValidateModelConfig, the directory
    name check, the backend lookup, NormalizeInstanceGroup/ValidateInstanceGroup.

    `gpus` are the usable GPU ids; none means Triton built without GPU support.
    `backend_directory`: --backend-directory, where Python-based backends are found.
    With `check_io=False` inputs/outputs are left unchecked, as Triton does until the
    backend's auto_complete_config has run (then call `apply_auto_complete`).
    """
    out = ModelConfig()
    out.CopyFrom(cfg)
    _autocomplete_backend_fields(out, model_name, model_path)
    config_checks.normalize_model_config(out)
    config_checks.validate_model_config(out)
    if out.name != model_name:
        raise invalid_arg(f"unexpected directory name '{model_name}' for model '{out.name}', "
                          "directory name must equal model name")
    if out.platform != config_checks.ENSEMBLE_PLATFORM:
        _check_backend(out, model_path, backend_directory)
    gpu_ids = sorted(set(gpus))
    config_checks.normalize_instance_groups(out, gpu_ids)
    config_checks.validate_instance_groups(out, gpu_ids)
    if check_io:
        config_checks.validate_io_config(out)
    return out


def apply_auto_complete(cfg: ModelConfig, updated: ModelConfig) -> ModelConfig:
    """Merge the whole config a model's `auto_complete_config` returned, as Triton's
    UpdateModelConfig does (max_batch_size, inputs, outputs, the scheduler when none
    was chosen, decoupled; nothing else), then normalize and check the result as
    Model::Init does. Call it (with the config unchanged when the model has no
    auto_complete_config) after `complete_defaults(..., check_io=False)`."""
    out = ModelConfig()
    out.CopyFrom(cfg)
    out.max_batch_size = updated.max_batch_size
    del out.input[:]
    out.input.extend(updated.input)
    del out.output[:]
    out.output.extend(updated.output)
    current = out.WhichOneof("scheduling_choice")
    proposed = updated.WhichOneof("scheduling_choice")
    if current is None:
        if proposed is not None:
            getattr(out, proposed).CopyFrom(getattr(updated, proposed))
    elif proposed is not None and proposed != current:
        number = ModelConfig.DESCRIPTOR.fields_by_name[current].number
        # Triton prints the current choice twice (sic).
        raise ServerError(ErrorCode.INTERNAL, f"Cannot update scheduling choice from {number} "
                          f"to {number} when auto-completing.")
    if updated.HasField("model_transaction_policy"):
        out.model_transaction_policy.decoupled = updated.model_transaction_policy.decoupled
    config_checks.normalize_model_config(out)
    config_checks.validate_model_config(out)
    config_checks.validate_io_config(out)
    return out


def _autocomplete_backend_fields(cfg: ModelConfig, model_name: str,
                                 model_path: Path | None) -> None:
    """Triton's AutoCompleteBackendFields, for the backends pbserve has: the name from
    the directory; ONNX Runtime, OpenVINO and PyTorch from the platform, the file name
    or a model.onnx / model.xml / model.pt in the first version folder (checked before
    Python, as Triton); backend "python" when a model.py is there; the platform and file name
    those backends imply."""
    if not cfg.name:
        cfg.name = model_name
    if not cfg.backend:
        unnamed = not cfg.platform and not cfg.default_model_filename
        for backend, platform, filename in _FRAMEWORKS:
            if (platform and cfg.platform == platform) or \
                    cfg.default_model_filename == filename or (
                    unnamed and _first_version_has_file(model_path, filename)):
                cfg.backend = backend
                break
        else:
            if cfg.default_model_filename == PYTHON_MODEL_FILENAME or (
                    unnamed and _first_version_has_file(model_path, PYTHON_MODEL_FILENAME)):
                cfg.backend = PYTHON_BACKEND
            elif unnamed:
                # Triton's custom-backend guess: "<anything>.<backend>" names the backend.
                if "." not in model_name:
                    raise invalid_arg(
                        f"Invalid model name: Could not determine backend for model "
                        f"'{model_name}' with no backend in model configuration. Expected "
                        "model name of the form 'model.<backend_name>'.")
                backend = model_name.split(".", 1)[1]
                cfg.backend = backend
                cfg.default_model_filename = f"model.{backend}"
    if cfg.backend == PYTHON_BACKEND and not cfg.default_model_filename:
        cfg.default_model_filename = PYTHON_MODEL_FILENAME
    for backend, platform, filename in _FRAMEWORKS:
        if cfg.backend == backend:
            cfg.platform = cfg.platform or platform
            cfg.default_model_filename = cfg.default_model_filename or filename


# (backend, platform, default model file name) of the frameworks with a built-in backend
_FRAMEWORKS = (("onnxruntime", "onnxruntime_onnx", "model.onnx"),
               ("openvino", "", "model.xml"),  # Triton gives OpenVINO no platform
               ("pytorch", "pytorch_libtorch", "model.pt"))


def _first_version_has_file(model_path: Path | None, filename: str) -> bool:
    """Triton looks only in the first subdirectory by name ("1" < "10" < "2"), for a
    file (a folder of that name does not count)."""
    if model_path is None:
        return False
    try:
        subdirs = sorted(p.name for p in Path(model_path).iterdir() if p.is_dir())
    except OSError:
        return False
    return bool(subdirs) and (Path(model_path) / subdirs[0] / filename).is_file()


_PYTHON_RUNTIMES = ("", "libtriton_python.so")


def _check_backend(cfg: ModelConfig, model_path: Path | None = None,
                   backend_directory: Path = Path(model_backends.DEFAULT_BACKEND_DIRECTORY)
                   ) -> None:
    """TritonModel::Create: a backend must be named and be one we have: Python, or a
    Python-based backend (pbserve/model_backends: a model.py in the model's folders, a
    built-in one, or one in --backend-directory)."""
    if not cfg.backend:
        raise invalid_arg(f"must specify 'backend' for '{cfg.name}'")
    if cfg.backend != PYTHON_BACKEND:
        if cfg.runtime in ("", model_backends.BACKEND_MODEL_FILENAME) and \
                model_backends.backend_exists(cfg.backend, model_path, backend_directory):
            return
        raise invalid_arg(f"unable to find backend library for backend '{cfg.backend}', "
                          "try specifying runtime on the model configuration.")
    if cfg.runtime not in _PYTHON_RUNTIMES:
        raise invalid_arg(f"unable to find backend library '{cfg.runtime}' for model "
                          f"'{cfg.name}'")
