"""String arguments of the pb_utils API: `str`, or `bytes` as Triton's (pybind11's
std::string arguments take both; a BYTES input's element is `bytes`)."""

from __future__ import annotations

from typing import Any


def as_str(what: str, value: Any) -> str:
    """`value` as a str (bytes are decoded as UTF-8); TypeError naming `what` otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    raise TypeError(f"{what} must be a str or bytes, got {type(value).__name__}")
