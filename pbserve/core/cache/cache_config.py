"""The response cache's size from tritonserver's flags: `--cache-config local,size=N`
(repeatable, `<cache name>,<setting>=<value>`) or the older `--response-cache-byte-size N`.
Only Triton's `local` cache exists here; every mistake is a ValueError naming it."""

from __future__ import annotations

import logging

log = logging.getLogger("pbserve")

LOCAL_CACHE = "local"


def cache_size(cache_config: list[str] | None, response_cache_byte_size: str | None
               ) -> int | None:
    """The local cache's size in bytes, None when no cache is configured. As
    tritonserver: both flags at once are refused, the older one warns it is deprecated,
    a size of 0 (no cache can be made of it) is an error."""
    if cache_config and response_cache_byte_size is not None:
        raise ValueError("Incompatible flags --response-cache-byte-size and --cache-config "
                         "both provided. Please provide one or the other.")
    if response_cache_byte_size is not None:
        log.warning("'--response-cache-byte-size' has been deprecated! This will default to "
                    "the 'local' cache implementation with the provided byte size for its "
                    "config. Please use '--cache-config' instead. The equivalent "
                    "--cache-config CLI args would be: '--cache-config=local,size=%s'",
                    response_cache_byte_size)
        return _size(response_cache_byte_size, "--response-cache-byte-size")
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
    unknown = sorted(set(settings) - {LOCAL_CACHE})
    if unknown:
        raise ValueError(f"--cache-config: unsupported cache '{unknown[0]}': pbserve has "
                         f"Triton's '{LOCAL_CACHE}' cache only (--cache-config "
                         f"local,size=<bytes>)")
    local = settings[LOCAL_CACHE]
    extra = sorted(set(local) - {"size"})
    if extra:
        raise ValueError(f"--cache-config: unknown setting '{extra[0]}' for the 'local' "
                         f"cache (its one setting is size=<bytes>)")
    if "size" not in local:
        raise ValueError("--cache-config local: the 'local' cache needs size=<bytes>")
    return _size(local["size"], "--cache-config local,size")


def _size(text: str, flag: str) -> int:
    try:
        size = int(text)
    except ValueError:
        raise ValueError(f"{flag}={text}: expected a whole number of bytes") from None
    if size <= 0:
        raise ValueError(f"{flag}={text}: the cache size must be at least 1 byte "
                         f"(Triton cannot make a local cache of {size} bytes)")
    return size
