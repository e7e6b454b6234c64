"""Triton's per-model inference counters and their Prometheus text exposition (and
pbserve's count of failed stub restarts)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

# Triton's `reason` label of nv_inference_request_failure: refused by the scheduler
# before execute (queue full, timed out, unloaded), cancelled, failed in the model or its
# stub, anything else.
REJECTED, CANCELED, BACKEND, OTHER = "REJECTED", "CANCELED", "BACKEND", "OTHER"
FAILURE_REASONS = (REJECTED, CANCELED, BACKEND, OTHER)

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
    # pbserve's own (Triton does not restart a stub that died, so it has none).
    ("restart_failures", "pbserve_stub_restart_failures",
     "Number of failed attempts to restart a model instance's stub process", "counter"),
)


@dataclass
class ModelStats:
    model: str
    version: str
    success: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    inference_count: int = 0
    exec_count: int = 0
    request_us: int = 0
    queue_us: int = 0
    compute_infer_us: int = 0
    pending: int = 0
    restart_failures: int = 0
    success_us: int = 0
    executed: int = 0  # requests that reached execute (queue/compute figures count these)
    last_inference_ms: int = 0
    # batch size -> [executions, their total compute ns]
    batches: dict[int, list[int]] = field(default_factory=dict)

    @property
    def failure(self) -> int:
        return sum(self.failures.values())

    def reset(self) -> None:
        for f in fields(self):
            if f.name not in ("model", "version"):
                setattr(self, f.name, f.default_factory() if f.name in ("batches", "failures")
                        else 0)

    def statistics(self) -> dict[str, Any]:
        """Triton's statistics extension entry for this model version (durations in ns;
        compute_input/compute_output are part of compute_infer here)."""
        def figure(count: int, us: int) -> dict[str, int]:
            return {"count": count, "ns": us * 1000}

        return {
            "name": self.model, "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count, "execution_count": self.exec_count,
            "inference_stats": {
                "success": figure(self.success, self.success_us),
                "fail": figure(self.failure, 0),
                "queue": figure(self.executed, self.queue_us),
                "compute_input": figure(self.executed, 0),
                "compute_infer": figure(self.executed, self.compute_infer_us),
                "compute_output": figure(self.executed, 0),
                "cache_hit": figure(0, 0), "cache_miss": figure(0, 0),
            },
            "response_stats": {},
            "batch_stats": [
                {"batch_size": size, "compute_input": {"count": n, "ns": 0},
                 "compute_infer": {"count": n, "ns": ns},
                 "compute_output": {"count": n, "ns": 0}}
                for size, (n, ns) in sorted(self.batches.items())],
            "memory_usage": [],
        }


# What /metrics shows of a ModelStats, as sent between processes (distributed/statistics.py).
COUNTERS = ("success", "failures", "inference_count", "exec_count", "request_us",
            "queue_us", "compute_infer_us", "pending", "restart_failures")


def counters(stats: ModelStats) -> dict[str, Any]:
    """The figures /metrics renders, as plain JSON."""
    return {"model": stats.model, "version": stats.version,
            **{name: getattr(stats, name) for name in COUNTERS}}


def sum_counters(entries: list[dict[str, Any]]) -> list[ModelStats]:
    """`counters()` of the same model version (from several servers) added up."""
    total: dict[tuple[str, str], ModelStats] = {}
    for entry in entries:
        key = (entry["model"], entry["version"])
        stats = total.get(key) or total.setdefault(key, ModelStats(*key))  # new only for a new key
        for name in COUNTERS:
            if name == "failures":
                for reason, count in entry[name].items():
                    stats.failures[reason] = stats.failures.get(reason, 0) + count
            else:
                setattr(stats, name, getattr(stats, name) + entry[name])
    return [total[key] for key in sorted(total)]


def render(stats: list[ModelStats]) -> str:
    """Prometheus text format, one family after another, a sample per model version."""
    lines: list[str] = []
    for attr, family, help_text, kind in _FAMILIES:
        lines.append(f"# HELP {family} {help_text}")
        lines.append(f"# TYPE {family} {kind}")
        for s in stats:
            if attr == "failure":  # one series per reason, as Triton
                lines.extend(f'{family}{{model="{s.model}",reason="{reason}",'
                             f'version="{s.version}"}} {count}'
                             for reason, count in s.failures.items())
                continue
            lines.append(f'{family}{{model="{s.model}",version="{s.version}"}} '
                         f"{getattr(s, attr)}")
    return "\n".join(lines) + "\n"
