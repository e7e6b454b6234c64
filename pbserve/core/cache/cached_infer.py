"""A unary request through the response cache, for a model or an ensemble (Triton caches
an ensemble's response at its top level too): answered from the cache, or run and its
response kept, with Triton's statistics of each."""

from __future__ import annotations

import itertools
import time
from typing import Awaitable, Callable

from pbserve.core.cache.store import ResponseStore
from pbserve.core.observability.metrics import ModelStats
from pbserve.core.types import InferRequest, InferResponse

_loads = itertools.count(1)


def new_load() -> int:
    """A number for a model's load, never given before in this server."""
    return next(_loads)


async def infer_cached(cache: ResponseStore, stats: ModelStats, model: str, version: str,
                       request: InferRequest, requested: tuple[str, ...],
                       run: Callable[[], Awaitable[InferResponse]], loaded: int = 0
                       ) -> InferResponse:
    """The response to a validated `request`: the cache's (a hit counts as a success
    with its lookup as `cache_hit`), else `run()`'s, kept when it succeeded (its lookup
    and insertion count as `cache_miss` and add to the request's time). `loaded`: which
    load of the model this is, so that a reloaded model never answers with what its
    previous load made (those entries age out; a cache shared by servers leaves it out).
    A cache that cannot be reached answers a miss, and keeps nothing."""
    started = time.monotonic_ns()
    key = cache.key(model, version, loaded, request, requested)
    entry = await cache.fetch(key, started)
    looked = time.monotonic_ns()
    if entry is not None:
        stats.cache_hit(looked - started, time.monotonic_ns() - started)
        return entry.response(model, version, request.id)
    response = await run()
    inserting = time.monotonic_ns()
    if await cache.keep(key, response):
        stats.cache_miss(looked - started + time.monotonic_ns() - inserting)
    return response
