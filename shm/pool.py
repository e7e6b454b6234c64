"""A growable allocator over shared-memory regions owned by this process.

Each process allocates only in its own pool; the other side maps those regions by name
(`RegionMap`) and hands blocks back with a message when it is done with them. So no
allocator state is shared between processes and no cross-process lock is needed.

Blocks come in size classes (powers of two up to 256 KiB, then multiples of 64 KiB) with
a free list per class, so a buffer of the same size is reused, already faulted in:
repeated 64 MiB requests cost a memcpy, not page faults.

The pool starts with one region of `default_size` and grows by `growth_size` (Triton's
`shm-default-byte-size`, `shm-growth-byte-size`); a block larger than the growth size
gets a region of its own. `trim` gives back regions that hold no live block and had no
allocation since the previous `trim` (so a pool used steadily keeps its faulted-in
regions), keeping up to `default_size`; `trim(force=True)`, under pressure, gives back
every empty region. `make_region` makes another kind of region: a CUDA pool's
(shm/cuda_region.py), whose name is the token another process maps it by.
Region names are never reused, so a mapping another process keeps cached can never
stand for a newer region; the owner tells the others to drop theirs.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, NamedTuple

from shm.client_region import ClientWindow, is_client_token
from shm.cuda_region import CudaImports, DeviceBytes, is_cuda_token
from shm.region import POOL_GROWTH_FAILED, Region, ShmExhausted

MIB = 1 << 20
DEFAULT_SIZE = 1 * MIB  # Triton's shm-default-byte-size
DEFAULT_GROWTH = 1 * MIB  # Triton's shm-growth-byte-size
_MIN_CLASS = 64
_POW2_LIMIT = 256 * 1024
_LARGE_STEP = 64 * 1024
PAGE = 4096  # what `prepare` faults in: the first request's small blocks lie there


def size_class(nbytes: int) -> int:
    """The block size that holds `nbytes`."""
    if nbytes <= _MIN_CLASS:
        return _MIN_CLASS
    if nbytes <= _POW2_LIMIT:
        return 1 << (nbytes - 1).bit_length()
    return -(-nbytes // _LARGE_STEP) * _LARGE_STEP


class Block(NamedTuple):
    """An allocation: where it lives and how many bytes of it are in use (immutable; a
    NamedTuple because one is built per tensor and a frozen dataclass costs 3x more)."""

    region: str
    offset: int
    nbytes: int


class ShmSizes(NamedTuple):
    """A pool's first region and the size it grows by; `cuda`: (GPU, bytes) pairs, the
    first allocation and growth of a stub's CUDA pool on that GPU (64 MiB if unnamed)."""

    default: int = DEFAULT_SIZE
    growth: int = DEFAULT_GROWTH
    cuda: tuple[tuple[int, int], ...] = ()


class Pool:
    """Allocator over regions named `<prefix>-p<serial>`; thread-safe.

    `on_pressure(attempt)`, when given, is called (outside the pool's lock) when /dev/shm
    is full; it may free memory (trim this pool, ask others to) and says whether to try
    again (`attempt` counts from 1).
    """

    def __init__(self, prefix: str, default_size: int = DEFAULT_SIZE,
                 growth_size: int = DEFAULT_GROWTH, max_bytes: int | None = None,
                 on_pressure: Callable[[int], bool] | None = None,
                 make_region: Callable[[str, int], Any] = Region.create) -> None:
        self.prefix = prefix
        self._make_region = make_region
        self.default_size = default_size
        self.growth_size = growth_size
        self.max_bytes = max_bytes
        self.on_pressure = on_pressure
        self._regions: dict[str, Region] = {}
        self._serial = 0
        self._current: Region | None = None
        self._bump = 0
        self._free: dict[int, list[tuple[str, int]]] = {}
        self._live: dict[tuple[str, int], int] = {}
        self._epoch = 0  # trim() calls so far
        self._used_in: dict[str, int] = {}  # region -> the epoch of its last allocation
        self._lock = threading.Lock()

    @property
    def total_bytes(self) -> int:
        return sum(r.size for r in self._regions.values())

    @property
    def live_blocks(self) -> int:
        return len(self._live)

    def region(self, name: str) -> Region:
        return self._regions[name]

    def alloc(self, nbytes: int) -> Block:
        """A block of at least `nbytes`; grows the pool by a region when needed. When
        /dev/shm is full, `on_pressure` runs and the allocation is tried again while it
        says so."""
        attempt = 0
        while True:
            try:
                return self._alloc(nbytes)
            except ShmExhausted:
                attempt += 1
                if self.on_pressure is None or not self.on_pressure(attempt):
                    raise

    def _alloc(self, nbytes: int) -> Block:
        cls = size_class(nbytes)
        with self._lock:
            free = self._free.get(cls)
            key = free.pop() if free else self._carve(cls)
            self._live[key] = cls
            self._used_in[key[0]] = self._epoch
        return Block(key[0], key[1], nbytes)

    def view(self, block: Block) -> memoryview:
        return self._regions[block.region].view(block.offset, block.nbytes)

    def store(self, data: memoryview) -> Block:
        """A new block holding a copy of `data` (1-D unsigned bytes): one memcpy
        straight into the mapping, without a view of the block."""
        nbytes = data.nbytes
        block = self.alloc(nbytes)
        if nbytes:
            self._regions[block.region].map[block.offset:block.offset + nbytes] = data
        return block

    def free(self, region: str, offset: int) -> None:
        """Return a block to its free list; freeing twice is an error."""
        key = (region, offset)
        with self._lock:
            cls = self._live.pop(key, None)
            if cls is None:
                raise ValueError(f"shm block {region}@{offset} is not allocated")
            free = self._free.get(cls)
            if free is None:
                self._free[cls] = [key]
            else:
                free.append(key)

    def prepare(self, touch: int = PAGE) -> str:
        """Make the first region now rather than on the first allocation, its first
        `touch` bytes written so that their pages are faulted in (the rest are only
        reserved); its name. Nothing to do when the pool already has one."""
        with self._lock:
            if self._regions:
                return next(iter(self._regions))
            region = self._new_region(self.default_size)
            self._current, self._bump = region, 0
            touched = min(touch, region.size)
            region.map[:touched] = bytes(touched)
        return region.name

    def _carve(self, cls: int) -> tuple[str, int]:
        region = self._current
        if region is not None and self._bump + cls <= region.size:
            offset = self._bump
            self._bump += cls
            return region.name, offset
        base = self.default_size if not self._regions else self.growth_size
        if cls > base:  # a region of its own: the current one goes on serving small blocks
            return self._new_region(cls).name, 0
        region = self._new_region(base)
        self._current, self._bump = region, cls
        return region.name, 0

    def _new_region(self, size: int) -> Region:
        if self.max_bytes is not None and self.total_bytes + size > self.max_bytes:
            raise ShmExhausted(
                f"{POOL_GROWTH_FAILED}: pool {self.prefix} cannot grow by {size} bytes: it "
                f"holds {self.total_bytes} of its limit of {self.max_bytes} bytes")
        region = self._make_region(f"{self.prefix}-p{self._serial}", size)
        self._serial += 1
        self._regions[region.name] = region
        return region

    def has_spare(self) -> bool:
        """Whether `trim` may yet give a region back (once its blocks are free): one
        that is not the current region, or a current one larger than `default_size`.
        Without, an idle owner need not wake up to trim."""
        with self._lock:
            return any(region is not self._current or region.size > self.default_size
                       for region in self._regions.values())

    def trim(self, force: bool = False) -> list[str]:
        """Unlink and unmap regions that hold no live block: those not allocated from
        since the previous call, beyond `default_size` bytes of them kept (`force`: every
        empty one). Their names, for the processes that mapped them to drop."""
        with self._lock:
            self._epoch += 1
            busy = {region for region, _ in self._live}
            keep = 0 if force else self.default_size
            gone = []
            for name, region in list(self._regions.items()):
                if name in busy:
                    continue
                if not force and self._used_in.get(name, -1) >= self._epoch - 1:
                    continue
                if region.size <= keep and region is self._current:
                    keep -= region.size
                    continue
                gone.append(name)
                del self._regions[name]
                self._used_in.pop(name, None)
                if region is self._current:
                    self._current = None
                region.unlink()
                region.close()
            if gone:
                dropped = set(gone)
                for cls, free in self._free.items():
                    self._free[cls] = [key for key in free if key[0] not in dropped]
        return gone

    def close(self) -> None:
        """Unlink and unmap every region."""
        with self._lock:
            for region in self._regions.values():
                region.unlink()
                region.close()
            self._regions.clear()
            self._free.clear()
            self._live.clear()
            self._current = None


class RegionMap:
    """Regions of other processes, attached on first use and cached by name. A client's
    window (shm/client_region.py) is mapped from its token the same way."""

    def __init__(self) -> None:
        self._regions: dict[str, Region | ClientWindow] = {}
        self._lock = threading.Lock()
        self._cuda: CudaImports | None = None  # made when a CUDA token is first seen

    @property
    def cuda(self) -> CudaImports:
        """The GPU allocations of other processes mapped here (CUDA tokens)."""
        if self._cuda is None:
            with self._lock:
                if self._cuda is None:
                    self._cuda = CudaImports()
        return self._cuda

    def view(self, region: str, offset: int, nbytes: int) -> memoryview:
        """The bytes of a block; for GPU memory (a CUDA token), a `DeviceBytes` that has
        only their size (the parent passes such tensors on, never reads them)."""
        mapped = self._regions.get(region)
        if mapped is None:
            with self._lock:
                mapped = self._regions.get(region)
                if mapped is None:
                    if is_cuda_token(region):  # GPU memory: only its size is there to see
                        return DeviceBytes(nbytes)  # type: ignore[return-value]
                    mapped = ClientWindow.open_token(region) if is_client_token(region) \
                        else Region.attach(region)
                    self._regions[region] = mapped
        if offset < 0 or nbytes < 0 or offset + nbytes > mapped.size:
            raise ValueError(f"shm block {region}@{offset}+{nbytes} lies outside the region")
        return mapped.view(offset, nbytes)

    def add(self, window: ClientWindow) -> None:
        """A window this process already mapped (the parent's, at registration)."""
        with self._lock:
            self._regions[window.name] = window

    def drop(self, names: Iterable[str]) -> None:
        """Unmap these regions (their owner gave them back)."""
        names = list(names)
        if self._cuda is not None:
            self._cuda.drop([name for name in names if is_cuda_token(name)])
        with self._lock:
            for name in names:
                mapped = self._regions.pop(name, None)
                if mapped is not None:
                    mapped.close()

    def forget(self, prefix: str) -> None:
        """Drop the mappings of regions whose name starts with `prefix` (a dead stub's,
        or an unregistered client window's token)."""
        if self._cuda is not None:
            self._cuda.drop_prefix(prefix)
        with self._lock:
            for name in [n for n in self._regions if n.startswith(prefix)]:
                self._regions.pop(name).close()

    def close(self) -> None:
        if self._cuda is not None:
            self._cuda.close()
        with self._lock:
            for region in self._regions.values():
                region.close()
            self._regions.clear()


__all__ = ["Block", "Pool", "RegionMap", "ShmExhausted", "ShmSizes", "size_class"]
