"""GPU tensors in and out of a stub by CUDA IPC (docs/gpu.md).

Out: a GPU tensor that leaves for another stub (a BLS input; an output for a BLS caller
that takes GPU outputs) is copied once, device to device, into a block of this stub's
CUDA pool (`Pool` over shm/cuda_region.py, one per device, made on first use), and its
descriptor names that block's token. The block is this stub's until the parent gives it
back (RELEASE, BLS_RELEASE), as a shm block is. An input of the running request that is
handed on as an output as it is (a pipeline stage, an identity) is not copied: the
response names the block it came in (`lend_input`), whose owner is the caller.

In: a descriptor naming a CUDA token is mapped once per allocation (`RegionMap.cuda`)
and becomes a GPU tensor over the other process's memory (`device_tensor`), or host
bytes (`host_tensor`) where the model takes CPU inputs or the caller asked for CPU.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

import numpy as np

from backend_utils import _dlpack
from backend_utils.tensor import _TO_DLPACK, Tensor
from backend_utils.dtypes import _code_of_name
from shm import cuda_driver
from shm.cuda_region import cuda_region_maker
from shm.pool import Block, Pool, RegionMap

POOL_BYTES = 64 << 20  # each device's first allocation and growth unless
#   --cuda-memory-pool-byte-size says (Triton's default); a larger tensor gets its own
TRIM_EVERY_S = 60.0  # an idle allocation goes back after one to two of these: mapping
#   one again in another process costs ~150 ms (1 GiB, H100), a shm region's far less


class DeviceBlock:
    """The owner of a GPU tensor over shared device memory: its collection says the
    tensor and every DLPack view of it are gone (weakref.finalize)."""

    __slots__ = ("__weakref__",)


class GpuMemory:
    """This stub's CUDA pools and its record of lent GPU inputs; thread-safe."""

    def __init__(self, prefix: str, regions: RegionMap,
                 pool_bytes: dict[int, int] | None = None) -> None:
        self.prefix = prefix  # every pool region's tag starts with it
        self._regions = regions
        self._pool_bytes = pool_bytes or {}  # device -> its pool's allocation size
        self._pools: dict[int, Pool] = {}
        self._lent: dict[tuple[int, int], Block] = {}
        self._lock = threading.Lock()
        self._trimmed_at = time.monotonic()

    # -- out ----------------------------------------------------------------------------
    def pool(self, device_id: int) -> Pool:
        pool = self._pools.get(device_id)
        if pool is None:
            with self._lock:
                pool = self._pools.get(device_id)
                if pool is None:
                    size = self._pool_bytes.get(device_id, POOL_BYTES)
                    pool = self._pools[device_id] = Pool(
                        f"{self.prefix}-g{device_id}", size, size,
                        make_region=cuda_region_maker(device_id))
        return pool

    def export(self, tensor: Tensor) -> Block:
        """(token, offset, nbytes) of a block holding the GPU tensor's bytes: a lent input
        as it is, else a copy in this stub's pool (freed again if the copy fails)."""
        info = tensor._gpu[0]
        lent = self._lent.get((info.data_ptr, info.nbytes))
        if lent is not None:
            return lent
        pool = self.pool(info.device_id)
        block = pool.alloc(info.nbytes)
        try:
            target = pool.region(block.region).pointer + block.offset
            cuda_driver.copy(info.device_id, target, info.data_ptr, info.nbytes)
        except BaseException:
            pool.free(block.region, block.offset)
            raise
        return block

    def is_own(self, token: str) -> bool:
        """Whether the token names a region of this stub's CUDA pools."""
        return token.rsplit(":", 1)[-1].startswith(self.prefix + "-g")

    def free(self, token: str, offset: int) -> bool:
        """A block given back; False if it is not this stub's (a lent input's)."""
        if not self.is_own(token):
            return False
        self._pools[self._device_of(token)].free(token, offset)
        return True

    def _device_of(self, token: str) -> int:
        """The device of one of this stub's own regions (its tag: <prefix>-g<device>-p<n>)."""
        tag = token.rsplit(":", 1)[-1]
        return int(tag[len(self.prefix) + 2:].split("-", 1)[0])

    def lend_input(self, pointer: int, nbytes: int, desc: tuple) -> tuple[int, int]:
        """An input of the running request may go out as an output without a copy; the
        key to `unlend` when the request's answer is made."""
        key = (pointer, nbytes)
        with self._lock:
            self._lent[key] = Block(desc[3], desc[4], desc[5])
        return key

    def unlend(self, key: tuple[int, int]) -> None:
        with self._lock:
            self._lent.pop(key, None)

    def trim(self, force: bool) -> list[str]:
        """The pools' idle regions given back (Pool.trim): their tokens. The stub asks
        whenever it idles; but for `force`, the pools trim at most every TRIM_EVERY_S,
        so an allocation is kept while it is used at least that often."""
        now = time.monotonic()
        if not force and now - self._trimmed_at < TRIM_EVERY_S:
            return []
        self._trimmed_at = now
        gone: list[str] = []
        for pool in list(self._pools.values()):
            gone.extend(pool.trim(force))
        return gone

    def live_blocks(self) -> int:
        """Blocks of this stub's CUDA pools not yet given back."""
        return sum(pool.live_blocks for pool in list(self._pools.values()))

    def has_spare(self) -> bool:
        return any(pool.has_spare() for pool in list(self._pools.values()))

    def close(self) -> None:
        for pool in list(self._pools.values()):
            pool.close()
        self._pools.clear()

    # -- in -----------------------------------------------------------------------------
    def pointer(self, token: str, offset: int, nbytes: int) -> tuple[int, int]:
        """(device, device pointer) of a block: one of this stub's own (a BLS input that
        came back as it was sent), or another process's, mapped by its handle."""
        if self.is_own(token):
            device = self._device_of(token)
            return device, self._pools[device].region(token).pointer + offset
        return self._regions.cuda.pointer(token, offset, nbytes)

    def device_tensor(self, name: str, datatype: str, shape: Any, token: str, offset: int,
                      nbytes: int) -> tuple[Tensor, DeviceBlock]:
        """A GPU tensor over a block of shared device memory (no copy), and its owner:
        the tensor and every DLPack view of it keep the owner alive."""
        device, pointer = self.pointer(token, offset, nbytes)
        owner = DeviceBlock()
        return _tensor_over(name, datatype, shape, device, pointer, owner), owner

    def device_copy(self, name: str, datatype: str, shape: Any, host: memoryview,
                    device_id: int) -> Tensor:
        """A GPU tensor on `device_id` holding a copy of host bytes (a CPU output for a
        BLS caller that prefers GPU memory), in a block of this stub's pool there, freed
        once the tensor and every DLPack view of it are gone."""
        pool = self.pool(device_id)
        block = pool.alloc(len(host))
        try:
            pointer = pool.region(block.region).pointer + block.offset
            source = np.frombuffer(host, np.uint8)
            cuda_driver.copy(device_id, pointer, source.ctypes.data, source.nbytes)
        except BaseException:
            pool.free(block.region, block.offset)
            raise
        owner = DeviceBlock()
        weakref.finalize(owner, pool.free, block.region, block.offset)
        return _tensor_over(name, datatype, shape, device_id, pointer, owner)

    def host_tensor(self, name: str, datatype: str, shape: Any, token: str, offset: int,
                    nbytes: int) -> Tensor:
        """A CPU tensor holding a copy of a block of shared device memory."""
        device, pointer = self.pointer(token, offset, nbytes)
        data = np.empty(nbytes, np.uint8)
        cuda_driver.copy(device, data.ctypes.data, pointer, nbytes)
        return Tensor._from_triton(name, datatype, shape, data)

    def write(self, destination: tuple[str, int, int], tensor: Tensor) -> None:
        """Copy an output (GPU or CPU) into a client's CUDA region; the caller checked
        that it fits."""
        token, offset, _ = destination
        if tensor._gpu is not None:
            source, nbytes = tensor._gpu[0].data_ptr, tensor._gpu[0].nbytes
        else:
            host = np.frombuffer(tensor._raw_bytes(), np.uint8)  # alive until copied
            source, nbytes = host.ctypes.data, host.nbytes
        device, target = self._regions.cuda.pointer(token, offset, nbytes)
        cuda_driver.copy(device, target, source, nbytes)


def _tensor_over(name: str, datatype: str, shape: Any, device: int, pointer: int,
                 owner: DeviceBlock) -> Tensor:
    """A GPU tensor over device memory at `pointer`, alive as long as `owner` is."""
    code, bits = _TO_DLPACK[_code_of_name(datatype)]
    info = _dlpack.DLInfo(data_ptr=pointer, device_type=_dlpack.DEVICE_CUDA,
                          device_id=device, code=code, bits=bits, lanes=1,
                          shape=tuple(int(d) for d in shape), strides=None)
    return Tensor._from_dl_info(name, info, owner)
