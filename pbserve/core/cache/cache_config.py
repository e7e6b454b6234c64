"""The response cache from tritonserver's flags: `--cache-config <cache>,<key>=<value>`
(repeatable) or the older `--response-cache-byte-size N`. Triton's `local` cache
(`size`) and its `redis` cache (redis_settings.py); every mistake is a ValueError
naming it."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pbserve.core.cache.redis_settings import REDIS_CACHE, RedisSettings

log = logging.getLogger("pbserve")

LOCAL_CACHE = "local"


@dataclass(frozen=True)
class LocalSettings:
    """Triton's `local` cache: an LRU of `size` bytes in the server's memory."""

    size: int


CacheSettings = LocalSettings | RedisSettings


def cache_settings(cache_config: list[str] | None, response_cache_byte_size: str | None
                   ) -> CacheSettings | None:
    """The server's response cache, None when none is configured. As tritonserver: both
    flags at once are refused, the older one warns it is deprecated, one cache at most."""
    if cache_config and response_cache_byte_size is not None:
        raise ValueError("Incompatible flags --response-cache-byte-size and --cache-config "
                         "both provided. Please provide one or the other.")
    if response_cache_byte_size is not None:
        log.warning("'--response-cache-byte-size' has been deprecated! This will default to "
                    "the 'local' cache implementation with the provided byte size for its "
                    "config. Please use '--cache-config' instead. The equivalent "
                    "--cache-config CLI args would be: '--cache-config=local,size=%s'",
                    response_cache_byte_size)
        return LocalSettings(_size(response_cache_byte_size, "--response-cache-byte-size"))
    if not cache_config:
        return None
    settings: dict[str, dict[str, str]] = {}
    for text in cache_config:
        name, comma, rest = text.partition(",")
        key, equals, value = rest.partition("=")
        if not comma or not equals or not name or "=" in name or not key:
            raise ValueError(f"No cache specified. --cache-config option format is "
                             f"<cache name>,<setting>=<value>. Got {text}")
        settings.setdefault(name, {})[key] = value
    unknown = sorted(set(settings) - {LOCAL_CACHE, REDIS_CACHE})
    if unknown:
        raise ValueError(f"--cache-config: unsupported cache '{unknown[0]}': pbserve has "
                         f"Triton's '{LOCAL_CACHE}' and '{REDIS_CACHE}' caches")
    if len(settings) > 1:
        raise ValueError("found multiple cache configurations, but only a single cache is "
                         "currently supported")
    if REDIS_CACHE in settings:
        return RedisSettings.parse(settings[REDIS_CACHE])
    return _local(settings[LOCAL_CACHE])


def _local(local: dict[str, str]) -> LocalSettings:
    extra = sorted(set(local) - {"size"})
    if extra:
        raise ValueError(f"--cache-config: unknown setting '{extra[0]}' for the 'local' "
                         f"cache (its one setting is size=<bytes>)")
    if "size" not in local:
        raise ValueError("--cache-config local: the 'local' cache needs size=<bytes>")
    return LocalSettings(_size(local["size"], "--cache-config local,size"))


def _size(text: str, flag: str) -> int:
    try:
        size = int(text)
    except ValueError:
        raise ValueError(f"{flag}={text}: expected a whole number of bytes") from None
    if size <= 0:
        raise ValueError(f"{flag}={text}: the cache size must be at least 1 byte "
                         f"(Triton cannot make a local cache of {size} bytes)")
    return size
