"""Lookup helpers over requests, responses and model-config dicts (Triton's utils)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .request import InferenceRequest
    from .response import InferenceResponse
    from .tensor import Tensor


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's first input called `name`, or None (optional inputs may be absent)."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(
    inference_response: InferenceResponse, name: str
) -> Tensor | None:
    """The response's first output called `name`, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def _config_entry(model_config: dict[str, Any], section: str, name: str) -> dict[str, Any] | None:
    for entry in model_config.get(section, ()):
        if entry["name"] == name:
            return entry
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The `input` entry of a parsed model config called `name`, or None."""
    return _config_entry(model_config, "input", name)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The `output` entry of a parsed model config called `name`, or None."""
    return _config_entry(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether a parsed model config asks for decoupled responses."""
    if "model_transaction_policy" in model_config:
        return model_config["model_transaction_policy"]["decoupled"]
    return False
