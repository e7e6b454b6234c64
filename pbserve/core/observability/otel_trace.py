"""Triton's OpenTelemetry trace mode (`--trace-config mode=opentelemetry`): spans exported
with the OpenTelemetry SDK's OTLP/HTTP exporter (the optional extra `pbserve[otel]`).

The spans are Triton's (server `src/tracer.cc`), all of kind SERVER from the tracer
"triton-server": a top-level "InferRequest" span per traced client request (a child of
the W3C `traceparent` the client sent, if any); under it a span named after the model
(attributes triton.model_name, triton.model_version, triton.trace_id,
triton.trace_parent_id, triton.request_id; events REQUEST_START, QUEUE_START,
REQUEST_END); under that a "compute" span (COMPUTE_START, COMPUTE_END) for a model that
executes. An ensemble executes nothing itself: its span has no compute span, its steps'
model spans are its children. A BLS call made with `trace=request.trace()` is a model
span under its caller's model span, beside the caller's compute span (tritonserver 2.51
with the Python backend: the backend reports the compute timestamps after `execute`
returns, so no compute span is open when the call starts; docs/tracing.md shows both
trees). The model sees its model span as `request.trace().get_context()`:
`{"traceparent": "00-..."}`.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span

DEFAULT_URL = "http://localhost:4318/v1/traces"
SERVICE_NAME = "triton-inference-server"
TRACER_NAME = "triton-server"
# `--trace-config opentelemetry,<setting>=<value>`: the Batch Span Processor's settings
# (Triton's names) -> the SDK's arguments
BSP_SETTINGS = {"bsp_max_queue_size": "max_queue_size",
                "bsp_schedule_delay": "schedule_delay_millis",
                "bsp_max_export_batch_size": "max_export_batch_size"}
SETTINGS = ("url", "resource", *BSP_SETTINGS)
_MISSING = ("OpenTelemetry tracing needs the OpenTelemetry SDK and its OTLP/HTTP exporter: "
            "pip install 'pbserve[otel]'")


class OtelExport:
    """The tracer provider of the command line's settings (`url`, `resource=key=value`,
    `bsp_*`). Owns the exporter's thread until `close`."""

    def __init__(self, settings: list[tuple[str, str]]) -> None:
        try:
            from opentelemetry import trace as api
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator)
        except ImportError as exc:
            raise ValueError(_MISSING) from exc
        self.settings = dict(settings)
        url = self.settings.get("url", DEFAULT_URL)
        attributes = {"service.name": SERVICE_NAME}
        for key, value in settings:
            if key == "resource":
                name, _, attr = value.partition("=")
                attributes[name] = attr
        processor_args = {BSP_SETTINGS[k]: int(v) for k, v in settings if k in BSP_SETTINGS}
        self._provider = TracerProvider(resource=Resource.create(attributes))
        self._provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=url), **processor_args))
        self.tracer = self._provider.get_tracer(TRACER_NAME)
        self._api = api
        self._propagator = TraceContextTextMapPropagator()
        # OpenTelemetry's times are the real-time clock's; pbserve stamps monotonic ns
        self.offset_ns = time.time_ns() - time.monotonic_ns()

    def extract(self, headers: dict[str, str]) -> Any:
        """The OpenTelemetry context of a request's `traceparent`/`tracestate` (lower-case
        names), or None when it has no valid one."""
        if "traceparent" not in headers:
            return None
        context = self._propagator.extract(headers)
        span = self._api.get_current_span(context)
        return context if span.get_span_context().is_valid else None

    def start(self, name: str, start_ns: int, parent: Any,
              attributes: dict[str, Any] | None = None) -> "Span":
        """A SERVER span started at monotonic `start_ns`; `parent`: a span, a context, or
        None (a new trace)."""
        if parent is not None and not isinstance(parent, dict):  # a Context is a dict
            parent = self._api.set_span_in_context(parent)
        return self.tracer.start_span(name, context=parent, kind=self._api.SpanKind.SERVER,
                                      start_time=start_ns + self.offset_ns,
                                      attributes=attributes)

    def context_json(self, span: "Span") -> str:
        """What `request.trace().get_context()` gives the model, as Triton's."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, self._api.set_span_in_context(span))
        return json.dumps(carrier)

    def close(self) -> None:
        """Export what is left and stop the exporter's thread."""
        self._provider.shutdown()


class OtelTrace:
    """One traced request's spans (`Trace`'s interface: `child`, `finish`, `id`,
    `context`)."""

    __slots__ = ("id", "parent_id", "context", "_export", "_tracer", "_root", "_request")

    def __init__(self, export: OtelExport, tracer: Any, trace_id: int, model_name: str,
                 model_version: str, request_id: str, parent_id: int = 0,
                 parent_span: Any = None, propagated: Any = None) -> None:
        """`tracer`: the Tracer (`new_id`, `_held`, `_ended`: the live traces' books)."""
        self._export, self._tracer = export, tracer
        self.id, self.parent_id = trace_id, parent_id
        now = time.monotonic_ns()
        self._root: Span | None = None
        if parent_span is None:
            self._root = export.start("InferRequest", now, propagated)
            parent_span = self._root
        version = int(model_version) if model_version.isdigit() else -1
        attributes: dict[str, Any] = {
            "triton.model_name": model_name, "triton.model_version": version,
            "triton.trace_id": trace_id, "triton.trace_parent_id": parent_id}
        if request_id:
            attributes["triton.request_id"] = request_id
        self._request = export.start(model_name, now, parent_span, attributes)
        self._request.add_event("REQUEST_START", timestamp=now + export.offset_ns)
        self.context = export.context_json(self._request)

    def child(self, model_name: str, model_version: str, request_id: str) -> "OtelTrace":
        """The trace of a request made for this one (an ensemble's step, a BLS call):
        under this request's model span, as Triton places both."""
        return self._tracer._held(OtelTrace(self._export, self._tracer, self._tracer.new_id(),
                                            model_name, model_version, request_id, self.id,
                                            self._request))

    def finish(self, queue_start_ns: int, compute_start_ns: int, compute_end_ns: int) -> None:
        """End the spans; `compute_start_ns` 0: no compute span (never executed, or an
        ensemble)."""
        offset = self._export.offset_ns
        if queue_start_ns:
            self._request.add_event("QUEUE_START", timestamp=queue_start_ns + offset)
        if compute_start_ns:
            compute = self._export.start("compute", compute_start_ns, self._request)
            compute.add_event("COMPUTE_START", timestamp=compute_start_ns + offset)
            compute.add_event("COMPUTE_END", timestamp=compute_end_ns + offset)
            compute.end(end_time=compute_end_ns + offset)
        now = time.monotonic_ns()
        self._request.add_event("REQUEST_END", timestamp=now + offset)
        self._request.end(end_time=now + offset)
        if self._root is not None:
            self._root.end(end_time=now + offset)
        self._tracer._ended(self.id)
