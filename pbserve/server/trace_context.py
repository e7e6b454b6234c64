"""The W3C trace context (`traceparent`, `tracestate`) a client sent, read from HTTP
headers or gRPC metadata for Triton's OpenTelemetry trace mode (observability/tracing.py);
read only in that mode."""

from __future__ import annotations

from typing import Iterable

from pbserve.core.observability.tracing import TRACER

_NAMES = ("traceparent", "tracestate")


def from_http(headers: dict[bytes, bytes]) -> dict[str, str] | None:
    """The trace headers of an HTTP request (the parser's lower-case names), if any."""
    if TRACER.otel is None or b"traceparent" not in headers:
        return None
    return {name: headers[name.encode()].decode("latin-1") for name in _NAMES
            if name.encode() in headers}


def from_grpc(metadata: Iterable[tuple[str, str | bytes]] | None) -> dict[str, str] | None:
    """The trace metadata of a gRPC call, if any."""
    if TRACER.otel is None:
        return None
    found = {name: value for name, value in metadata or ()
             if name in _NAMES and isinstance(value, str)}
    return found if "traceparent" in found else None
