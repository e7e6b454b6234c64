"""Triton's trace extension (mode "triton"): settings, sampling, and the JSON trace file.

`TRACER` holds the global setting (from `--trace-config`/`--trace-*`) and per-model ones
(`/v2/models/<m>/trace/setting`: the fields a model sets, the global ones for the rest).
Each setting samples every `rate`-th request of its models while its level is not OFF,
its `count` is not 0 and a trace file is set; a sampled request's timestamps
(REQUEST_START, QUEUE_START, COMPUTE_START, COMPUTE_END, REQUEST_END; monotonic ns) are
kept and written as Triton writes them: every `log_frequency` traces to
`<trace_file>.<n>`, when `count` runs out to the next indexed file, and the rest at
shutdown to `<trace_file>` (to `<trace_file>.<n>` when `log_frequency` is set).

In mode "opentelemetry" (`configure` with an `OtelExport`) a sampled request is an
`OtelTrace` (otel_trace.py) instead, exported as spans; no trace file is needed, and a
request carrying a valid W3C `traceparent` is traced whatever the rate and count, as in
Triton. A trace is `live` from its sampling to its end: a BLS call made with
`trace=request.trace()` names its id, and its trace becomes that one's child.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pbserve.core.observability.otel_trace import OtelExport, OtelTrace

log = logging.getLogger("pbserve.trace")

LEVELS = ("TIMESTAMPS", "TENSORS")
FIELDS = ("trace_level", "trace_rate", "trace_count", "log_frequency")


@dataclass
class TraceSetting:
    """One setting; `None` in a model's setting means "the global one"."""

    trace_level: tuple[str, ...] | None = ()
    trace_rate: int | None = 1000
    trace_count: int | None = -1
    log_frequency: int | None = 0
    trace_file: str = ""


@dataclass
class _Sampler:
    """The counters and collected traces of one (global or model) setting."""

    setting: TraceSetting
    sampled: int = 0
    collected: list[list[dict]] = field(default_factory=list)
    file_index: int = 0


class Trace:
    """One sampled request's timestamps; `finish` hands it to its sampler."""

    __slots__ = ("id", "parent_id", "model_name", "model_version", "request_id", "stamps",
                 "_tracer", "_owner")
    context = ""  # the model's `request.trace().get_context()` (OpenTelemetry's only)

    def __init__(self, tracer: "Tracer", owner: str, trace_id: int, model_name: str,
                 model_version: str, request_id: str, parent_id: int = 0) -> None:
        self._tracer, self._owner = tracer, owner
        self.id = trace_id
        self.parent_id = parent_id
        self.model_name, self.model_version, self.request_id = (
            model_name, model_version, request_id)
        self.stamps: list[tuple[str, int]] = [("REQUEST_START", time.monotonic_ns())]

    def child(self, model_name: str, model_version: str, request_id: str) -> "Trace":
        """The trace of a request made for this one (an ensemble's step, a BLS call), as
        Triton traces composing models: always, with this trace as its parent."""
        return self._tracer._held(Trace(self._tracer, self._owner, self._tracer.new_id(),
                                        model_name, model_version, request_id, self.id))

    def finish(self, queue_start_ns: int, compute_start_ns: int, compute_end_ns: int) -> None:
        """Stamp the rest and hand the records over; `compute_start_ns` 0: no compute
        stamps (never executed, or an ensemble, which executes nothing itself)."""
        if queue_start_ns:  # 0: refused before it was queued
            self.stamps.append(("QUEUE_START", queue_start_ns))
        if compute_start_ns:  # 0: never executed (cancelled or refused in the queue)
            self.stamps += [("COMPUTE_START", compute_start_ns),
                            ("COMPUTE_END", compute_end_ns)]
        self.stamps.append(("REQUEST_END", time.monotonic_ns()))
        self._tracer._ended(self.id)
        self._tracer._collect(self._owner, self._records())

    def _records(self) -> list[dict]:
        version = int(self.model_version) if self.model_version.isdigit() else 0
        head = {"id": self.id, "model_name": self.model_name, "model_version": version,
                "request_id": self.request_id}
        if self.parent_id:  # Triton writes it for a child trace only
            head["parent_id"] = self.parent_id
        records: list[dict] = [head]
        records += [{"id": self.id, "timestamps": [{"name": name, "ns": ns}]}
                    for name, ns in self.stamps]
        return records


class Tracer:
    def __init__(self) -> None:
        self._global = _Sampler(TraceSetting())
        self._models: dict[str, _Sampler] = {}
        self._lock = threading.Lock()
        self._next_id = 0
        self._live: dict[int, Trace | OtelTrace] = {}
        self.otel: OtelExport | None = None  # mode "opentelemetry"
        self.enabled = False  # some setting may sample: the request path's one check

    # -- settings -----------------------------------------------------------------------
    def configure(self, setting: TraceSetting, otel: "OtelExport | None" = None) -> None:
        """The command line's global setting, and its exporter in mode opentelemetry."""
        with self._lock:
            self._global = _Sampler(setting)
            self.otel = otel
            self._refresh()

    def setting(self, model: str = "") -> dict[str, Any]:
        """Triton's answer: every field, the model's where it sets one (mode
        opentelemetry: no file fields, its own settings instead)."""
        with self._lock:
            s = self._effective(model)
        answer = {"trace_level": list(s.trace_level) or ["OFF"],
                  "trace_rate": str(s.trace_rate), "trace_count": str(s.trace_count)}
        if self.otel is None:
            return {**answer, "log_frequency": str(s.log_frequency),
                    "trace_file": s.trace_file, "trace_mode": "triton"}
        return {**answer, "trace_mode": "opentelemetry", **self.otel.settings}

    def update(self, model: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply validated changes (`trace_setting_changes`); None clears a model's field
        (back to the global one) or, globally, restores the default."""
        with self._lock:
            if model:
                sampler = self._models.get(model)
                if sampler is None:
                    sampler = self._models[model] = _Sampler(TraceSetting(
                        None, None, None, None, self._global.setting.trace_file))
            else:
                sampler = self._global
            default = TraceSetting()
            for name, value in changes.items():
                if value is None and not model:
                    value = getattr(default, name)
                setattr(sampler.setting, name, value)
            if "trace_count" in changes or "trace_rate" in changes:
                sampler.sampled = 0
            self._refresh()
        return self.setting(model)

    def _effective(self, model: str) -> TraceSetting:
        base = self._global.setting
        own = self._models[model].setting if model in self._models else None
        if own is None:
            return base
        return TraceSetting(*(getattr(own, f) if getattr(own, f) is not None
                              else getattr(base, f) for f in FIELDS), base.trace_file)

    def _refresh(self) -> None:
        settings = [self._global.setting] + [self._effective(m) for m in self._models]
        otel = self.otel is not None
        self.enabled = any(s.trace_level and (otel or (
            s.trace_rate and s.trace_count != 0 and s.trace_file)) for s in settings)

    # -- sampling -----------------------------------------------------------------------
    def sample(self, model_name: str, model_version: str, request_id: str,
               headers: dict[str, str] | None = None) -> "Trace | OtelTrace | None":
        """A trace when this request is sampled, else None. `headers`: the request's
        `traceparent`/`tracestate` (HTTP headers, gRPC metadata), if it has them."""
        with self._lock:
            owner = model_name if model_name in self._models else ""
            sampler = self._models[owner] if owner else self._global
            s = self._effective(owner)
            otel = self.otel
            if not s.trace_level:
                return None
            propagated = otel.extract(headers) if otel is not None and headers else None
            if propagated is None:  # a propagated context is traced regardless (Triton's)
                if not (s.trace_rate and s.trace_count != 0
                        and (s.trace_file or otel is not None)):
                    return None
                sampler.sampled += 1
                if sampler.sampled % s.trace_rate:
                    return None
                if s.trace_count > 0:  # a model counts down its own (from the global value)
                    sampler.setting.trace_count = s.trace_count - 1
                    self._refresh()
            self._next_id += 1
            trace_id = self._next_id
        if otel is None:
            return self._held(Trace(self, owner, trace_id, model_name, model_version,
                                    request_id))
        from pbserve.core.observability.otel_trace import OtelTrace
        return self._held(OtelTrace(otel, self, trace_id, model_name, model_version,
                                    request_id, propagated=propagated))

    def live(self, trace_id: int) -> "Trace | OtelTrace | None":
        """The trace of `trace_id` while its request runs (a BLS call names it)."""
        return self._live.get(trace_id)

    def _held(self, trace: Any) -> Any:
        self._live[trace.id] = trace
        return trace

    def _ended(self, trace_id: int) -> None:
        self._live.pop(trace_id, None)

    def new_id(self) -> int:
        with self._lock:
            self._next_id += 1
            return self._next_id

    def _collect(self, owner: str, records: list[dict]) -> None:
        with self._lock:
            sampler = self._models.get(owner, self._global) if owner else self._global
            s = self._effective(owner)
            sampler.collected.append(records)
            if s.log_frequency and len(sampler.collected) >= s.log_frequency:
                self._write_indexed(sampler, s.trace_file)
            elif s.trace_count == 0:
                self._write_indexed(sampler, s.trace_file)

    def _write_indexed(self, sampler: _Sampler, path: str) -> None:
        _write(f"{path}.{sampler.file_index}", sampler.collected)
        sampler.file_index += 1
        sampler.collected = []

    def close(self) -> None:
        """Shutdown: what each setting collected goes to its file; spans are exported."""
        if self.otel is not None:
            self.otel.close()
        with self._lock:
            for owner, sampler in [("", self._global), *self._models.items()]:
                if not sampler.collected:
                    continue
                s = self._effective(owner)
                if s.log_frequency or sampler.file_index:
                    self._write_indexed(sampler, s.trace_file)
                else:
                    _write(s.trace_file, sampler.collected)
                    sampler.collected = []


def _write(path: str, traces: list[list[dict]]) -> None:
    try:
        with open(path, "w") as f:
            json.dump([record for trace in traces for record in trace], f)
    except OSError as exc:
        log.error("failed writing trace file %s: %s", path, exc)


TRACER = Tracer()
