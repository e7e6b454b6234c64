"""Triton's response cache: responses of models with `response_cache { enable: true }`
kept in the parent's memory, by a hash of their requests (response_cache.py), sized by
--cache-config / --response-cache-byte-size (cache_config.py)."""
