"""Triton's per-model inference counters and their Prometheus text exposition."""

from __future__ import annotations

from dataclasses import dataclass, fields

# (attribute, Prometheus family, help text, type), in Triton's names.
_FAMILIES = (
    ("success", "nv_inference_request_success",
     "Number of successful inference requests, all batch sizes", "counter"),
    ("failure", "nv_inference_request_failure",
     "Number of failed inference requests, all batch sizes", "counter"),
    ("inference_count", "nv_inference_count",
     "Number of inferences performed (does not include cached requests)", "counter"),
    ("exec_count", "nv_inference_exec_count",
     "Number of model executions performed (does not include cached requests)", "counter"),
    ("request_us", "nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)",
     "counter"),
    ("queue_us", "nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)",
     "counter"),
    ("compute_infer_us", "nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached "
     "requests)", "counter"),
    ("pending", "nv_inference_pending_request_count",
     "Instantaneous number of pending requests awaiting execution per-model.", "gauge"),
)


@dataclass
class ModelStats:
    model: str
    version: str
    success: int = 0
    failure: int = 0
    inference_count: int = 0
    exec_count: int = 0
    request_us: int = 0
    queue_us: int = 0
    compute_infer_us: int = 0
    pending: int = 0

    def reset(self) -> None:
        for f in fields(self):
            if f.name not in ("model", "version"):
                setattr(self, f.name, 0)


def render(stats: list[ModelStats]) -> str:
    """Prometheus text format, one family after another, a sample per model version."""
    lines: list[str] = []
    for attr, family, help_text, kind in _FAMILIES:
        lines.append(f"# HELP {family} {help_text}")
        lines.append(f"# TYPE {family} {kind}")
        for s in stats:
            lines.append(f'{family}{{model="{s.model}",version="{s.version}"}} '
                         f"{getattr(s, attr)}")
    return "\n".join(lines) + "\n"
