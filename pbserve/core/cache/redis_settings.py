"""Triton's `redis` cache settings (`--cache-config redis,<key>=<value>`, repeatable), by
the names and meanings of triton-inference-server/redis_cache: host, port, user,
password, db, connect_timeout, socket_timeout, pool_size, wait_timeout (milliseconds,
0: wait forever) and the TLS settings tls_enabled, cert, key, cacert, cacert_dir, sni.
The user and password may come from TRITONCACHE_REDIS_USERNAME and
TRITONCACHE_REDIS_PASSWORD instead (the flag wins), as there.

pbserve's defaults differ in two: connect_timeout and socket_timeout are 1000 ms (Triton:
0, wait forever), so that a Redis that stops answering costs a request at most that long
before the cache is bypassed (redis_cache.py)."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from pbserve.secret_env import REDIS_CACHE_PASSWORD_ENV as PASSWORD_ENV
from pbserve.secret_env import REDIS_CACHE_USERNAME_ENV as USERNAME_ENV

REDIS_CACHE = "redis"

_TLS_FILES = ("cert", "key", "cacert")
_TLS_KEYS = ("tls_enabled", *_TLS_FILES, "cacert_dir", "sni")
_MS_KEYS = ("connect_timeout", "socket_timeout", "wait_timeout")
KNOWN_KEYS = ("host", "port", "user", "password", "db", *_MS_KEYS, "pool_size", *_TLS_KEYS)


@dataclass(frozen=True)
class RedisSettings:
    """Where the Redis server is and how to talk to it (see the module's docstring)."""

    host: str
    port: int
    user: str = "default"
    password: str = ""
    db: int = 0
    connect_timeout: int = 1000  # ms; 0: wait forever
    socket_timeout: int = 1000  # ms; 0: wait forever
    pool_size: int = 1
    wait_timeout: int = 1000  # ms for a connection of the pool; 0: wait forever
    tls_enabled: bool = False
    cert: str = ""
    key: str = ""
    cacert: str = ""
    cacert_dir: str = ""
    sni: str = ""

    def __repr__(self) -> str:  # never the password, in a log or a traceback
        return f"RedisSettings({self.host}:{self.port}, db={self.db}, tls={self.tls_enabled})"

    @classmethod
    def parse(cls, given: dict[str, str]) -> RedisSettings:
        """The settings of `--cache-config redis,...` (key -> value); ValueError naming
        what is wrong."""
        unknown = sorted(set(given) - set(KNOWN_KEYS))
        if unknown:
            hint = " (Triton's name is 'user')" if unknown[0] == "username" else ""
            raise ValueError(f"--cache-config: unknown setting '{unknown[0]}' for the "
                             f"'redis' cache{hint}; its settings are {', '.join(KNOWN_KEYS)}")
        if importlib.util.find_spec("redis") is None:
            raise ValueError("--cache-config redis needs the redis package (redis-py): "
                             "pip install 'pbserve[redis]'")
        if not given.get("host") or "port" not in given:
            raise ValueError(
                "Failed to initialize RedisCache, didn't specify address. Must at a minimum "
                "specify 'host' and 'port' in the configuration - e.g. pbserve --cache-config "
                "redis,host=redis --cache-config redis,port=6379 --model-repository=/models")
        tls = _tls_enabled(given)
        for name in _TLS_KEYS[1:]:
            if given.get(name) and not tls:
                raise ValueError(f"--cache-config redis,{name}=...: a TLS setting; add "
                                 f"--cache-config redis,tls_enabled=true")
        for name in _TLS_FILES:
            if given.get(name) and not Path(given[name]).is_file():
                raise ValueError(f"--cache-config redis,{name}={given[name]}: no such file")
        if given.get("cacert_dir") and not Path(given["cacert_dir"]).is_dir():
            raise ValueError(f"--cache-config redis,cacert_dir={given['cacert_dir']}: "
                             f"no such directory")
        return cls(
            host=given["host"], port=_whole(given, "port", 1, 65535),
            user=given.get("user") or os.environ.get(USERNAME_ENV) or "default",
            password=given.get("password") or os.environ.get(PASSWORD_ENV, ""),
            db=_whole(given, "db", 0), pool_size=_whole(given, "pool_size", 1),
            **{name: _whole(given, name, 0) for name in _MS_KEYS if name in given},
            tls_enabled=tls, **{name: given[name] for name in _TLS_KEYS[1:] if name in given})


def _tls_enabled(given: dict[str, str]) -> bool:
    value = given.get("tls_enabled", "false")
    if value not in ("true", "false"):
        raise ValueError(f"--cache-config redis,tls_enabled={value}: expected true or false")
    return value == "true"


def _whole(given: dict[str, str], name: str, least: int, most: int | None = None) -> int:
    text = given.get(name, str(least))
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--cache-config redis,{name}={text}: expected a whole number") \
            from None
    if value < least or (most is not None and value > most):
        bound = f"from {least} to {most}" if most is not None else f"at least {least}"
        raise ValueError(f"--cache-config redis,{name}={text}: expected a number {bound}")
    return value
