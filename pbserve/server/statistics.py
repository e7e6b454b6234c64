"""Triton's statistics extension, in its shape, for both frontends: HTTP's
GET /v2/models[/M[/versions/V]]/stats (http/routes.py) and gRPC's ModelStatistics
(grpc/service.py, which turns the same dicts into its message).

The InferenceCore protocol has no statistics yet; clients such as perf_analyzer ask for
them at start-up, so an answer in Triton's format is given: the core's own figures
when it offers `model_statistics(name, version) -> list[dict]` (or an awaitable of it:
a frontend on the request plane asks its workers), else zeros for every version the
model's metadata lists (NOT_FOUND for an unknown model, as Triton).
"""

from __future__ import annotations

import inspect
from typing import Any

from pbserve.core.api import InferenceCore

_DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer",
              "compute_output", "cache_hit", "cache_miss")


def zero_stats(name: str, version: str) -> dict[str, Any]:
    return {
        "name": name, "version": version, "last_inference": 0,
        "inference_count": 0, "execution_count": 0,
        "inference_stats": {key: {"count": 0, "ns": 0} for key in _DURATIONS},
        "response_stats": {}, "batch_stats": [], "memory_usage": [],
    }


async def model(core: InferenceCore, name: str, version: str) -> dict[str, Any]:
    own = getattr(core, "model_statistics", None)
    if own is not None:
        stats = own(name, version)
        return {"model_stats": await stats if inspect.isawaitable(stats) else stats}
    versions = [version] if version else core.model_metadata(name).get("versions", [])
    return {"model_stats": [zero_stats(name, v) for v in versions]}


async def all_models(core: InferenceCore) -> dict[str, Any]:
    stats: list[dict[str, Any]] = []
    for entry in core.repository_index(ready_only=True):
        stats.extend((await model(core, entry["name"], str(entry.get("version", ""))))
                     ["model_stats"])
    return {"model_stats": stats}
