"""Triton's `redis` cache: responses kept in a Redis (or Valkey) server that several
pbserve servers may share, through redis-py's asyncio client on the server's event loop.

Key: `pbserve:v1:<model>:<version>:<sha256>`, the SHA-256 of the model's name and
version, the outputs asked for and each input, sorted by name (name, datatype, shape
and bytes, each length-prefixed): the same request gives the same key on every server,
whatever its process (the local cache's keyed hash and load number cannot be shared).
Value: a Redis hash (redis_entry.py). Neither is Triton's: a pbserve entry is not read by
tritonserver, nor the other way round. Entries are never expired by pbserve (as Triton):
size the server with Redis's `maxmemory` and an eviction policy such as `allkeys-lru`.

When Redis cannot be reached, a request is answered without the cache and counted as a
miss (redis_outage.py says when Redis is asked again, and logs it a few times)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Awaitable, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

from pbserve.core.cache.redis_entry import BadEntry, decode, encode
from pbserve.core.cache.redis_outage import WARN_EVERY_S, RedisOutage
from pbserve.core.cache.redis_settings import RedisSettings
from pbserve.core.cache.store import CacheCounters, CachedResponse, counter_gauges, gauge_lines
from pbserve.core.types import InferRequest, InferResponse
from pbserve.errors import ErrorCode, ServerError

log = logging.getLogger("pbserve")

KEY_PREFIX = "pbserve:v1:"
_UNREACHABLE = (RedisError, OSError, asyncio.TimeoutError)
T = TypeVar("T")


class SniSSLConnection(aioredis.SSLConnection):
    """A TLS connection that names `sni` as the server (Triton's `sni` setting)."""

    def __init__(self, *, sni: str, **kwargs) -> None:
        self.sni = sni
        super().__init__(**kwargs)

    def _connection_arguments(self) -> dict:
        return {**super()._connection_arguments(), "server_hostname": self.sni}


class RedisCache:
    """The `ResponseStore` (store.py) over one Redis server."""

    def __init__(self, settings: RedisSettings) -> None:
        self.settings = settings
        self.counters = CacheCounters()
        self.outage = RedisOutage(f"{settings.host}:{settings.port}")
        self._pool: aioredis.BlockingConnectionPool | None = None
        self._client: aioredis.Redis | None = None
        self._bad_warned_at = -WARN_EVERY_S

    @staticmethod
    def key(model: str, version: str, load: int, request: InferRequest,
            requested: tuple[str, ...]) -> str:
        """The request's key (see the module's docstring); `load` is left out, so that
        every server (and the next load) finds it."""
        digest = hashlib.sha256()

        def put(data: bytes | memoryview) -> None:
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)

        put(model.encode())
        put(version.encode())
        put(b"%d" % len(requested))
        for name in requested:
            put(name.encode())
        for tensor in sorted(request.inputs, key=_name):
            put(tensor.name.encode())
            put(tensor.datatype.encode())
            put(",".join(str(d) for d in tensor.shape).encode())
            view = memoryview(tensor.data)
            put(view if view.ndim == 1 and view.format in ("B", "b", "c") else view.cast("B"))
        return f"{KEY_PREFIX}{model}:{version}:{digest.hexdigest()}"

    async def open(self) -> None:
        """Connect and ping, as Triton does at start (a server that cannot be reached,
        or refuses the credentials, stops the start with Triton's words)."""
        self._pool = aioredis.BlockingConnectionPool(**_pool_arguments(self.settings))
        self._client = aioredis.Redis(connection_pool=self._pool)
        try:
            await self._client.ping()
        except _UNREACHABLE as exc:
            await self.close()
            raise ServerError(ErrorCode.INTERNAL, f"Failed to initialize RedisCache: "
                              f"{type(exc).__name__}: {exc}") from None
        log.info("Response cache: 'redis' at %s:%d, db %d%s", self.settings.host,
                 self.settings.port, self.settings.db,
                 ", TLS" if self.settings.tls_enabled else "")

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.disconnect()
            self._pool = self._client = None

    async def fetch(self, key: str, started_ns: int) -> CachedResponse | None:
        """The entry of `key` from Redis; None on a miss, also when Redis cannot be
        reached (or holds something under `key` that is not a whole entry)."""
        counters = self.counters
        counters.lookups += 1
        entry = None
        if self._client is not None and self.outage.may_try():
            fields = await self._ask(key, self._client.hgetall(key))
            if fields:
                try:
                    entry = decode(fields)
                except BadEntry as exc:
                    self._bad_entry(key, exc)
        else:
            self.outage.went_without()
        if entry is None:
            counters.misses += 1
        else:
            counters.hits += 1
        counters.lookup_ns += time.monotonic_ns() - started_ns
        return entry

    async def keep(self, key: str, response: InferResponse) -> bool:
        """Store a successful `response` under `key` (a response of another server's
        miss there already is overwritten with the same). True for every successful
        response: as Triton, a request whose insertion failed is still a miss."""
        if response.error is not None:
            return False
        fields = encode(response)
        if fields is None:  # outputs on the GPU
            return False
        if self._client is None or not self.outage.may_try():
            return True
        started = time.monotonic_ns()
        await self._ask(key, self._client.hset(key, mapping=fields))
        self.counters.insertion_ns += time.monotonic_ns() - started
        return True

    def metrics_text(self) -> str:
        """Triton's server-wide cache metrics that this server can count: its lookups,
        hits, misses and their times (the entries are Redis's: `INFO keyspace`)."""
        return gauge_lines(counter_gauges(self.counters))

    async def _ask(self, key: str, command: Awaitable[T]) -> T | None:
        """`command`'s answer, the outage told how it went; None when Redis could not be
        reached, or refused the command on `key` (something else is kept there)."""
        try:
            answer = await command
        except ResponseError as exc:
            self.outage.succeeded()
            self._bad_entry(key, exc)
            return None
        except _UNREACHABLE as exc:
            self.outage.failed(exc)
            return None
        except asyncio.CancelledError:
            self.outage.abandoned()
            raise
        self.outage.succeeded()
        return answer

    def _bad_entry(self, key: str, error: Exception) -> None:
        now = time.monotonic()
        if now - self._bad_warned_at >= WARN_EVERY_S:  # at most one line in 30 s
            self._bad_warned_at = now
            log.warning("Response cache: Redis entry %s cannot be used (%s); answered as a "
                        "miss", key, error)


def _name(tensor) -> str:
    return tensor.name


def _pool_arguments(s: RedisSettings) -> dict:
    """redis-py's connection pool arguments for Triton's settings: one retry at once on a
    new connection when the connection failed (a pooled one that Redis dropped, by a
    restart, fails its next command), no more and none after a timeout (a Redis that is
    away is a miss at once); timeouts in seconds (None: wait forever)."""
    arguments: dict = dict(
        host=s.host, port=s.port, db=s.db, max_connections=s.pool_size,
        timeout=s.wait_timeout / 1000 or None,
        socket_connect_timeout=s.connect_timeout / 1000 or None,
        socket_timeout=s.socket_timeout / 1000 or None,
        retry=Retry(NoBackoff(), 1, (RedisConnectionError,)), client_name="pbserve")
    if s.password:
        arguments.update(username=s.user, password=s.password)
    if s.tls_enabled:
        arguments.update(
            connection_class=SniSSLConnection if s.sni else aioredis.SSLConnection,
            ssl_certfile=s.cert or None, ssl_keyfile=s.key or None,
            ssl_ca_certs=s.cacert or None, ssl_ca_path=s.cacert_dir or None,
            ssl_check_hostname=True, ssl_cert_reqs="required")
        if s.sni:
            arguments["sni"] = s.sni
    return arguments
