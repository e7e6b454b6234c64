"""Giving shared memory back: the parent's pool and the stubs' pools shrink when idle, and
all of them give back every empty region at once when /dev/shm runs short.

A pool region can be given back only when no process maps it any more (the pages of an
unlinked segment live as long as a mapping does). So the owner that trims (shm/pool.py)
names the regions it unlinked, and the others drop their mappings:
- the parent trims its pool every TRIM_INTERVAL_S (regions idle since the last tick) and
  sends FORGET_REGIONS to every stub;
- a stub trims its pool when its main queue has been idle PARENT_CHECK_S (and again
  each PARENT_CHECK_S while it holds a region it may give back), and sends
  REGIONS_GONE; the parent unmaps them and relays FORGET_REGIONS to the other stubs (a
  BLS caller or callee may have mapped them).
Under pressure (an allocation found /dev/shm full: `relieve`) the parent moves the
inputs of requests waiting for an instance out to process memory (input_placer.py),
trims with force and sends TRIM to every stub, at most once per PRESSURE_INTERVAL_S.
The stubs are reached through their instances (`StubControl`). Used on the event loop's
thread only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from shm.names import SHM_DIR
from shm.pool import Pool, RegionMap, ShmSizes
from shm.region import POOL_GROWTH_FAILED
from stub import protocol as p

log = logging.getLogger("pbserve.core")

TRIM_INTERVAL_S = 1.0
SHM_WAIT_S = 10.0  # a request waits this long at most for /dev/shm to take its inputs
PRESSURE_INTERVAL_S = 0.05
SIZE_OPTIONS = ("--backend-config=python,shm-default-byte-size=N and "
                "--backend-config=python,shm-growth-byte-size=N")


def shm_capacity() -> int:
    """The size of /dev/shm in bytes (0 if unknown)."""
    return shm_room()[1]


def shm_room() -> tuple[int, int]:
    """The free and total bytes of /dev/shm (free as any process may allocate them;
    both 0 if unknown)."""
    try:
        stat = os.statvfs(SHM_DIR)
    except OSError:
        return 0, 0
    return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize


def too_large_message(model: str, nbytes: int, capacity: int) -> str:
    """Why a request that can never fit fails: its size and what to change."""
    return (f"{POOL_GROWTH_FAILED}: cannot allocate {nbytes} bytes of shared memory for "
            f"the inputs of a request for model '{model}': /dev/shm holds {capacity} bytes "
            f"in all; raise its size (e.g. docker --shm-size)")


def waited_message(model: str, nbytes: int, waited_s: float) -> str:
    return (f"{POOL_GROWTH_FAILED}: cannot allocate {nbytes} bytes of shared memory for "
            f"the inputs of a request for model '{model}' within {waited_s:.0f} s: /dev/shm "
            f"is full (raise its size, e.g. docker --shm-size, or lower the pools' sizes, "
            f"{SIZE_OPTIONS})")


class StubControl(Protocol):
    """A stub as upkeep reaches it: through its instance (instances/instance.py
    ModelInstance), on its control queue."""

    def send_control(self, message: tuple) -> None:
        """`message` on the stub's control queue, if the stub is alive."""


class ShmPeer(Protocol):
    """Another process that maps the server's shm and is no stub (a frontend process:
    pbserve/frontends/link.py), told what a stub is told."""

    def forget_regions(self, names: tuple[str, ...]) -> None:
        """Unmap these regions: their owner gave them back."""

    def trim(self) -> None:
        """/dev/shm is short: give back every empty region of your pool now."""


class ShmUpkeep:
    """`instances()`: every stub of the server, through its instance; `peers()`: the
    server's other processes that map its shm (memory/peers.py)."""

    def __init__(self, sizes: ShmSizes, regions: RegionMap,
                 instances: Callable[[], Iterable[StubControl]],
                 peers: Callable[[], Iterable[ShmPeer]] = tuple) -> None:
        self.sizes = sizes
        self._regions = regions
        self._instances = instances
        self._peers = peers
        self._pool: Pool | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._relieved = 0.0
        self._evict_waiting: Callable[[], int] = lambda: 0

    def start(self, pool: Pool, evict_waiting: Callable[[], int]) -> None:
        """Keep `pool` trimmed; under pressure, `evict_waiting` moves what waiting
        requests hold of /dev/shm out to process memory (InputPlacer.relieve)."""
        self._pool = pool
        self._evict_waiting = evict_waiting
        pool.on_pressure = self.relieve
        self._timer = asyncio.get_running_loop().call_later(TRIM_INTERVAL_S, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pool = None

    def _tick(self) -> None:
        if self._pool is None:
            return
        self._forget(self._pool.trim(), None)
        self._timer = asyncio.get_running_loop().call_later(TRIM_INTERVAL_S, self._tick)

    def relieve(self, attempt: int = 1) -> bool:
        """/dev/shm is full: every pool gives back its empty regions now. False: the
        parent's allocation is not tried again at once (its request waits, scheduler.py)."""
        now = time.monotonic()
        if self._pool is None or now - self._relieved < PRESSURE_INTERVAL_S:
            return False
        self._relieved = now
        evicted = self._evict_waiting()
        if evicted:
            log.debug("moved %d bytes of waiting requests' inputs out of /dev/shm", evicted)
        self._forget(self._pool.trim(force=True), None)
        for instance in self._instances():
            instance.send_control(p.trim())
        for peer in self._peers():
            peer.trim()
        return False

    def regions_gone(self, source: StubControl | ShmPeer, names: tuple[str, ...]) -> None:
        """A stub (or a peer) gave these regions back: unmap them here and in the other
        stubs and peers."""
        self._forget(names, source)

    def _forget(self, names: Iterable[str], source: StubControl | ShmPeer | None) -> None:
        names = tuple(names)
        if not names:
            return
        self._regions.drop(names)
        for instance in self._instances():
            if instance is not source:
                instance.send_control(p.forget_regions(names))
        for peer in self._peers():
            if peer is not source:
                peer.forget_regions(names)
        log.debug("gave back shared-memory regions %s", ", ".join(names))
