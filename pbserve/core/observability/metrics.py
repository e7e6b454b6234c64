"""Triton's per-model inference counters and their Prometheus text exposition (and
pbserve's count of failed stub restarts)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from pbserve.core.observability.response_stats import ResponseStats

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
    ("compute_input_us", "nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include cached "
     "requests)", "counter"),
    ("compute_infer_us", "nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached "
     "requests)", "counter"),
    ("compute_output_us", "nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds (does not include "
     "cached requests)", "counter"),
    ("pending", "nv_inference_pending_request_count",
     "Instantaneous number of pending requests awaiting execution per-model.", "gauge"),
    # pbserve's own (Triton does not restart a stub that died, so it has none).
    ("restart_failures", "pbserve_stub_restart_failures",
     "Number of failed attempts to restart a model instance's stub process", "counter"),
)
# Triton's per-model response cache families: only models that enable the cache show.
_CACHE_FAMILIES = (
    ("cache_hits", 1, "nv_cache_num_hits_per_model", "Number of cache hits per model"),
    ("cache_hit_ns", 1000, "nv_cache_hit_duration_per_model",
     "Total cache hit duration per model, in microseconds"),
    ("cache_misses", 1, "nv_cache_num_misses_per_model", "Number of cache misses per model"),
    ("cache_miss_ns", 1000, "nv_cache_miss_duration_per_model",
     "Total cache miss (insert+lookup) duration per model, in microseconds"),
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
    # the response cache's (per model, as Triton's nv_cache_*_per_model; ns)
    cache_hits: int = 0
    cache_hit_ns: int = 0
    cache_misses: int = 0
    cache_miss_ns: int = 0
    success_us: int = 0
    failure_us: int = 0
    compute_input_ns: int = 0
    compute_output_ns: int = 0
    last_inference_ms: int = 0
    # batch size -> [executions, their total compute ns, input ns, output ns]
    batches: dict[int, list[int]] = field(default_factory=dict)
    # a decoupled model's responses by index (response_stats.py)
    responses: ResponseStats = field(default_factory=ResponseStats)
    # whether the nv_cache_*_per_model families show it (a model's or an ensemble's that
    # uses the response cache, as Triton 2.51)
    cache_enabled: bool = False

    @property
    def compute_input_us(self) -> int:
        return self.compute_input_ns // 1000

    @property
    def compute_output_us(self) -> int:
        return self.compute_output_ns // 1000

    @property
    def failure(self) -> int:
        return sum(self.failures.values())

    def reset(self) -> None:
        for f in fields(self):
            if f.name not in ("model", "version", "cache_enabled"):
                setattr(self, f.name, f.default_factory()
                        if f.name in ("batches", "failures", "responses") else 0)

    def cache_hit(self, lookup_ns: int, request_ns: int) -> None:
        """A request answered from the response cache (Triton's UpdateSuccessCacheHit:
        a success, no execution, no inference counted)."""
        self.success += 1
        self.success_us += request_ns // 1000
        self.request_us += request_ns // 1000
        self.cache_hits += 1
        self.cache_hit_ns += lookup_ns

    def cache_miss(self, miss_ns: int) -> None:
        """A response kept in the cache after a miss: its lookup and insertion time,
        added to the request's too (Triton's UpdateSuccessCacheMiss)."""
        self.cache_misses += 1
        self.cache_miss_ns += miss_ns
        self.success_us += miss_ns // 1000
        self.request_us += miss_ns // 1000

    def statistics(self) -> dict[str, Any]:
        """Triton's statistics extension entry for this model version (durations in ns).
        As Triton: queue counts the successes, compute_* the successes that executed (not
        the cache's hits), and only successes add to them; fail has the failures' time."""
        def figure(count: int, us: int) -> dict[str, int]:
            return {"count": count, "ns": us * 1000}

        computed = self.success - self.cache_hits

        return {
            "name": self.model, "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count, "execution_count": self.exec_count,
            "inference_stats": {
                "success": figure(self.success, self.success_us),
                "fail": figure(self.failure, self.failure_us),
                "queue": figure(self.success, self.queue_us),
                "compute_input": {"count": computed, "ns": self.compute_input_ns},
                "compute_infer": figure(computed, self.compute_infer_us),
                "compute_output": {"count": computed, "ns": self.compute_output_ns},
                "cache_hit": {"count": self.cache_hits, "ns": self.cache_hit_ns},
                "cache_miss": {"count": self.cache_misses, "ns": self.cache_miss_ns},
            },
            "response_stats": self.responses.statistics(),
            "batch_stats": [
                {"batch_size": size, "compute_input": {"count": n, "ns": in_ns},
                 "compute_infer": {"count": n, "ns": ns},
                 "compute_output": {"count": n, "ns": out_ns}}
                for size, (n, ns, in_ns, out_ns) in sorted(self.batches.items())],
            "memory_usage": [],
        }


# What /metrics shows of a ModelStats, as sent between processes (distributed/statistics.py).
COUNTERS = ("success", "failures", "inference_count", "exec_count", "request_us",
            "queue_us", "compute_infer_us", "pending", "restart_failures", "cache_hits",
            "cache_hit_ns", "cache_misses", "cache_miss_ns", "compute_input_ns",
            "compute_output_ns", "cache_enabled")  # (summed, cache_enabled is any server's)


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
    cached = [s for s in stats if s.cache_enabled]
    for attr, unit, family, help_text in _CACHE_FAMILIES if cached else ():
        lines += [f"# HELP {family} {help_text}", f"# TYPE {family} counter"]
        lines.extend(f'{family}{{model="{s.model}",version="{s.version}"}} '
                     f"{getattr(s, attr) // unit}" for s in cached)
    return "\n".join(lines) + "\n"
