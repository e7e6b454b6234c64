"""Triton's response cache: responses of models with `response_cache { enable: true }`
kept by a hash of their requests, behind one seam (store.py `ResponseStore`): the `local`
cache in the parent's memory (response_cache.py) or the `redis` cache that servers may
share (redis_cache.py), chosen by --cache-config / --response-cache-byte-size
(cache_config.py, stores.py)."""
