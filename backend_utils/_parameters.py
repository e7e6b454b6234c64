"""Request/response parameters: a dict of str -> bool/int/str, carried as JSON text."""

from __future__ import annotations

import json
from typing import Any

from .error import TritonModelException


def parameters_to_json(parameters: Any) -> str:
    """Validate like Triton (keys str, values bool/int/str) and serialise."""
    if parameters is None:
        return "{}"
    if not isinstance(parameters, dict):  # Triton names its C++ type: "Expect N8pybind114dictE"
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                "Expect parameters values to have type bool/int/str, found type "
                f"{type(value)}"
            )
    return json.dumps(parameters)
