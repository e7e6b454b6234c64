"""The response cache (Triton's `local` cache): responses kept by a hash of their
request, least recently used out first when the next one does not fit.

The key is the model's name, version and load, the outputs asked for and each input
(sorted by name): name, datatype, shape, size and a hash of its bytes: Python's SipHash,
keyed with a random key per process (a client cannot craft a collision unless
PYTHONHASHSEED fixes the key), 3x faster than SHA-256, which a writable buffer gets.
Triton hashes the name, version and each input's name and bytes (an unkeyed 64-bit
hash); pbserve also tells apart shapes, datatypes and requested outputs, which Triton's
documentation says a request is made of. Request parameters are not in the key, as in
Triton.

An entry is the outputs' bytes, copied once out of the stub's shared memory when the
miss is answered; a hit is answered with those `bytes` objects themselves (no copy per
hit: the frontends send them as they are). An evicted entry's bytes live on while a frontend
is still sending them. On the event loop only: no lock.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict

from pbserve.core.cache.store import (ENTRY_OVERHEAD, CacheCounters, CachedResponse,
                                      counter_gauges, gauge_lines)
from pbserve.core.types import Buffer, InferRequest, InferResponse
from shm.cuda_region import DeviceBytes

log = logging.getLogger("pbserve")

class ResponseCache:
    """An LRU of `CachedResponse`s holding at most `size` bytes (`CachedResponse.cost`)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self.counters = CacheCounters()
        self._entries: OrderedDict[tuple, CachedResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(model: str, version: str, load: int, request: InferRequest,
            requested: tuple[str, ...]) -> tuple:
        """The request's key (see the module's docstring)."""
        return (model, version, load, requested, tuple(sorted(
            [(t.name, t.datatype, tuple(t.shape), _digest(t.data)) for t in request.inputs],
            key=_by_name)))

    def lookup(self, key: tuple, started_ns: int) -> CachedResponse | None:
        """The entry of `key` (now the most recently used), None on a miss. `started_ns`:
        when the lookup began (before the key was computed): its duration is counted."""
        counters = self.counters
        entry = self._entries.get(key)
        counters.lookups += 1
        if entry is None:
            counters.misses += 1
        else:
            counters.hits += 1
            self._entries.move_to_end(key)
        counters.lookup_ns += time.monotonic_ns() - started_ns
        return entry

    def insert(self, key: tuple, response: InferResponse) -> bool:
        """Keep a copy of a successful `response` under `key`, evicting the least
        recently used entries to make room. False when it was not kept: the key is
        there already (another request's miss put it), or it cannot fit at all."""
        if key in self._entries or response.error is not None:
            return False
        if any(isinstance(t.data, DeviceBytes) for t in response.outputs):
            return False  # GPU outputs for a BLS caller (docs/gpu.md): no host bytes here
        started = time.monotonic_ns()
        outputs = tuple((t.name, t.datatype, tuple(t.shape), bytes(t.data))
                        for t in response.outputs)
        cost = ENTRY_OVERHEAD + sum(len(o[3]) + len(o[0]) for o in outputs)
        if cost > self.size:
            log.error("Failed to insert key [%016x] into response cache: the response "
                      "(%d bytes with its record) is larger than the cache (%d bytes)",
                      hash(key) & (1 << 64) - 1, cost, self.size)
            return False
        while self.used + cost > self.size:
            _, evicted = self._entries.popitem(last=False)
            self.used -= evicted.cost
            self.counters.evictions += 1
        self._entries[key] = CachedResponse(outputs, dict(response.parameters), cost)
        self.used += cost
        self.counters.insertion_ns += time.monotonic_ns() - started
        return True

    async def fetch(self, key: tuple, started_ns: int) -> CachedResponse | None:
        """`lookup`, as a `ResponseStore` (store.py) is asked."""
        return self.lookup(key, started_ns)

    async def keep(self, key: tuple, response: InferResponse) -> bool:
        """`insert`, as a `ResponseStore` is asked: a response that was not kept (there
        already, too large) is not counted as a miss."""
        return self.insert(key, response)

    async def open(self) -> None:
        """Nothing to open: the entries live in this process."""

    async def close(self) -> None:
        """Nothing to close."""

    def metrics_text(self) -> str:
        """Triton's server-wide cache metrics (gauges, durations in us)."""
        c = self.counters
        return gauge_lines((
            ("nv_cache_num_entries", "Number of responses stored in response cache",
             len(self._entries)),
            *counter_gauges(c),
            ("nv_cache_num_evictions", "Number of cache evictions in response cache",
             c.evictions),
            ("nv_cache_util", "Cache utilization [0.0 - 1.0]", self.used / self.size),
        ))


def _by_name(item: tuple) -> str:
    return item[0]


def _digest(data: Buffer) -> tuple[int, int] | bytes:
    """A tensor's bytes, hashed: (size, Python's keyed SipHash of them) where the buffer
    is read-only (the frontends' request bytes: no copy), else their SHA-256."""
    view = memoryview(data)
    if view.readonly:
        if view.ndim != 1 or view.format not in ("B", "b", "c"):
            view = view.cast("B")
        return view.nbytes, hash(view)
    return hashlib.sha256(view).digest()
