"""The seam between a model's requests and the response cache that keeps their responses:
`ResponseStore`, which Triton's `local` cache (response_cache.py) and its `redis` cache
(redis_cache.py) both are, with what they share: an entry (`CachedResponse`) and the
server-wide figures of Triton's nv_cache_* metrics (`CacheCounters`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Protocol

from pbserve.core.types import InferRequest, InferResponse, TensorData

# What an entry costs beyond its outputs' bytes (its record, the key), counted against
# the local cache's size so that many tiny responses cannot grow past it.
ENTRY_OVERHEAD = 128


@dataclass(frozen=True)
class CachedResponse:
    """One cached response: (name, datatype, shape, bytes) per output, its parameters."""

    outputs: tuple[tuple[str, str, tuple[int, ...], bytes], ...]
    parameters: dict
    cost: int  # bytes counted against the cache's size

    def response(self, model: str, version: str, request_id: str) -> InferResponse:
        """A response to `request_id` with this entry's bytes objects as its outputs'
        data (nothing copied: the frontends send `bytes` as they are)."""
        return InferResponse(model, version, request_id, outputs=[
            TensorData(name, datatype, shape, data)
            for name, datatype, shape, data in self.outputs],
            parameters=dict(self.parameters))


@dataclass
class CacheCounters:
    """The server-wide figures of Triton's nv_cache_* metrics (durations in ns)."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    lookup_ns: int = 0
    insertion_ns: int = 0


class ResponseStore(Protocol):
    """A response cache as a model's requests use it (cached_infer.py), on the event loop."""

    counters: CacheCounters

    def key(self, model: str, version: str, load: int, request: InferRequest,
            requested: tuple[str, ...]) -> Hashable:
        """The key of `request` to `model` (its `load`-th load, see cached_infer.py)
        asking for the outputs `requested`."""

    async def fetch(self, key: Hashable, started_ns: int) -> CachedResponse | None:
        """The entry of `key`, None on a miss (also when the cache cannot be reached);
        counted in `counters`, its lookup timed from `started_ns`."""

    async def keep(self, key: Hashable, response: InferResponse) -> bool:
        """Keep a successful `response` under `key`; whether the request counts as a
        cache miss (its lookup and this insertion timed as `cache_miss`)."""

    def metrics_text(self) -> str:
        """Its server-wide nv_cache_* metrics (Prometheus text)."""

    async def open(self) -> None:
        """Ready it before the first request (ServerError when it cannot be)."""

    async def close(self) -> None:
        """Let go of what it holds (connections) at the server's stop."""


def gauge_lines(families: tuple[tuple[str, str, object], ...]) -> str:
    """Prometheus text of (family, help, value) gauges."""
    lines = []
    for family, help_text, value in families:
        lines += [f"# HELP {family} {help_text}", f"# TYPE {family} gauge",
                  f"{family} {value}"]
    return "\n".join(lines) + "\n"


def counter_gauges(c: CacheCounters) -> tuple[tuple[str, str, object], ...]:
    """The nv_cache_* gauges every cache has: lookups, hits, misses and their times (us)."""
    return (
        ("nv_cache_num_lookups", "Number of cache lookups in response cache", c.lookups),
        ("nv_cache_num_hits", "Number of cache hits in response cache", c.hits),
        ("nv_cache_num_misses", "Number of cache misses in response cache", c.misses),
        ("nv_cache_lookup_duration",
         "Total cache lookup duration (hit and miss), in microseconds", c.lookup_ns // 1000),
        ("nv_cache_insertion_duration", "Total cache insertion duration, in microseconds",
         c.insertion_ns // 1000),
    )
