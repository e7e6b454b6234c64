"""Processes of the server besides its stubs that map its shared memory: the frontend
processes (pbserve/frontends/). They read stubs' and the parent's blocks (outputs) and
have blocks of their own that stubs read (inputs), so the parent's shm upkeep tells them
what it tells a stub (regions given back, trim now: memory/shm_upkeep.py `ShmPeer`), and
the regions of one that is gone are forgotten everywhere. On the event loop's thread."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.memory.shm_upkeep import ShmPeer
from shm.pool import RegionMap


class RegionUser(Protocol):
    """A stub as a peer's end reaches it (instances/instance.py ModelInstance)."""

    def forget_region(self, token: str) -> None:
        """Unmap every region whose name starts with `token`."""


class ShmPeers:
    """`instances()`: the server's stubs, through their instances."""

    def __init__(self, regions: RegionMap, instances: Callable[[], Iterable[RegionUser]]
                 ) -> None:
        self.regions = regions
        self._instances = instances
        self._peers: list[ShmPeer] = []
        self.refs: BlockRefs | None = None  # the parent's blocks (set once they exist)
        self.on_regions_gone: Callable[[ShmPeer, tuple[str, ...]], None] = \
            lambda _peer, _names: None  # ShmUpkeep.regions_gone, once it runs

    def __iter__(self) -> Iterator[ShmPeer]:
        return iter(self._peers)

    def add(self, peer: ShmPeer) -> None:
        self._peers.append(peer)

    def remove(self, peer: ShmPeer, prefix: str) -> None:
        """`peer` is gone: its regions (named under `prefix`) are unmapped here and in
        every stub (once nothing reads them: the caller waited for its requests)."""
        if peer in self._peers:
            self._peers.remove(peer)
        self.regions.forget(prefix)
        for instance in self._instances():
            instance.forget_region(prefix)

    def regions_gone(self, peer: ShmPeer, names: tuple[str, ...]) -> None:
        """`peer` trimmed these regions of its pool."""
        self.on_regions_gone(peer, names)
