"""The server's response cache made from its settings (cache_config.py): Triton's
`local` cache, or its `redis` cache (whose client, redis-py, is imported only then)."""

from __future__ import annotations

import logging

from pbserve.core.cache.cache_config import CacheSettings, LocalSettings
from pbserve.core.cache.response_cache import ResponseCache
from pbserve.core.cache.store import ResponseStore

log = logging.getLogger("pbserve")


def new_store(settings: CacheSettings | None) -> ResponseStore | None:
    """The cache `settings` describe, None for none; a `redis` one connects at its
    `open()`."""
    if settings is None:
        return None
    if isinstance(settings, LocalSettings):
        log.info("Response cache: 'local', %d bytes", settings.size)
        return ResponseCache(settings.size)
    from pbserve.core.cache.redis_cache import RedisCache

    return RedisCache(settings)
