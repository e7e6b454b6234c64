"""Model control from inside a model: load, unload and readiness of other models.

Needs the server in explicit model-control mode; the server's refusal comes back
as a `TritonModelException`.
"""

from __future__ import annotations

from typing import Any

from ._runtime import require_runtime
from ._strings import as_str
from .error import TritonModelException


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load or reload `model_name`; `config` is a JSON override, `files` maps
    "file:<relative path>" to contents (the server requires `config` with them)."""
    model_name = as_str("model_name", model_name)
    config = as_str("config", config)
    file_map: dict[str, bytes] | None = None
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"failed to load model '{model_name}', files should be a dictionary of "
                "file paths and file contents"
            )
        file_map = {}
        for path, content in files.items():
            file_map[as_str("files key", path)] = _as_bytes(content)
    runtime = require_runtime("load_model")
    try:
        runtime.load_model(model_name, config, file_map)
    except TritonModelException as exc:
        raise TritonModelException(f"Failed to load model: {exc}") from None


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload `model_name` (and, if asked, the models that depend on it)."""
    model_name = as_str("model_name", model_name)
    if not isinstance(unload_dependents, bool):
        raise TypeError("unload_dependents must be a bool")
    runtime = require_runtime("unload_model")
    try:
        runtime.unload_model(model_name, unload_dependents)
    except TritonModelException as exc:
        raise TritonModelException(f"Failed to unload model: {exc}") from None


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether `model_name` is ready; version "" means the version policy's default."""
    model_name = as_str("model_name", model_name)
    model_version = as_str("model_version", model_version)
    failure = "Failed to check model readiness"
    if model_version:
        try:
            version = int(model_version)
        except ValueError:
            raise TritonModelException(
                f"{failure}: failed to get model version from specified version string "
                f"'{model_version}', version should be an integral value > 0"
            ) from None
        if version < 0:
            raise TritonModelException(
                f"{failure}: failed to get model version from specified version string "
                f"'{model_version}', version should be an integral value > 0"
            )
    runtime = require_runtime("is_model_ready")
    try:
        return bool(runtime.is_model_ready(model_name, model_version))
    except TritonModelException as exc:
        raise TritonModelException(f"{failure}: {exc}") from None


def _as_bytes(content: Any) -> bytes:
    if isinstance(content, bytes):
        return content
    if isinstance(content, (bytearray, memoryview)):
        return bytes(content)
    raise TypeError(f"file contents must be bytes, got {type(content).__name__}")
