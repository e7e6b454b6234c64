"""GPU memory shared between processes by CUDA IPC, named by a *CUDA token*.

A CUDA token, `cuda:<device>:<byte_size>:<ipc handle, hex>:<tag>`, holds everything
another process needs to map an allocation: the device, the allocation's size and its
IPC handle. The tag keeps apart two names for one allocation (a stub pool's region name,
a client registration's serial), so that a mapping cached under a token never stands
for a newer registration. Tensor descriptors name a token as their region, the way they
name a shm region, with an offset into the allocation.

- `CudaRegion`: an allocation of this process (a stub's CUDA pool region, `Pool` with
  `make_region=cuda_region_maker(device)`), exported by its handle; closing it frees it.
- `CudaImports`: the allocations of other processes this one mapped, each opened once
  per process (by handle: two tokens of one allocation share the mapping) and closed
  when the last token naming it is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from shm import cuda_driver

CUDA_PREFIX = "cuda:"


def cuda_token(device_id: int, byte_size: int, handle: bytes, tag: str) -> str:
    return f"{CUDA_PREFIX}{device_id}:{byte_size}:{handle.hex()}:{tag}"


def is_cuda_token(region: str) -> bool:
    return region.startswith(CUDA_PREFIX)


CLIENT_TAG = "client"  # the tag of a client's registered region: client<serial>


def is_client_cuda_token(region: str) -> bool:
    """A client's CUDA shared memory region (not a stub's pool region)."""
    return region.startswith(CUDA_PREFIX) and region.rsplit(":", 1)[-1].startswith(CLIENT_TAG)


def parse_cuda_token(token: str) -> tuple[int, int, bytes]:
    """(device, byte size, handle); ValueError for a malformed token."""
    try:
        _, device, size, handle, _tag = token.split(":", 4)
        parsed = int(device), int(size), bytes.fromhex(handle)
    except ValueError:
        raise ValueError(f"malformed CUDA region token {token[:80]!r}") from None
    if len(parsed[2]) != cuda_driver.HANDLE_BYTES or parsed[0] < 0 or parsed[1] < 0:
        raise ValueError(f"malformed CUDA region token {token[:80]!r}")
    return parsed


class CudaRegion:
    """Device memory this process allocated and exports (the interface of
    `shm.region.Region` that `Pool` uses, less the host views)."""

    def __init__(self, device_id: int, size: int, tag: str) -> None:
        self.device_id = device_id
        self.size = size
        self.pointer = cuda_driver.alloc(device_id, size)
        try:
            handle = cuda_driver.ipc_handle(device_id, self.pointer)
        except BaseException:
            cuda_driver.free(device_id, self.pointer)
            raise
        self.name = cuda_token(device_id, size, handle, tag)

    def unlink(self) -> None:
        """Nothing to unlink: the memory goes with `close`."""

    def close(self) -> None:
        if self.pointer:
            cuda_driver.free(self.device_id, self.pointer)
            self.pointer = 0


def cuda_region_maker(device_id: int) -> Callable[[str, int], CudaRegion]:
    """`Pool(make_region=...)` for a pool of `device_id`'s memory."""
    return lambda name, size: CudaRegion(device_id, size, name)


class CudaImports:
    """Other processes' allocations mapped here, by token; thread-safe."""

    def __init__(self) -> None:
        self._tokens: dict[str, tuple[int, int, int]] = {}  # token -> (device, base, size)
        self._opened: dict[str, list[int]] = {}  # handle hex -> [base, size, tokens]
        self._lock = threading.Lock()

    def pointer(self, token: str, offset: int, nbytes: int) -> tuple[int, int]:
        """(device, device pointer) of `nbytes` at `offset` of the token's allocation,
        opened on first use; ValueError if the block lies outside it."""
        entry = self._tokens.get(token)
        if entry is None:
            entry = self._open(token, offset, nbytes)
        device, base, size = entry
        if offset < 0 or nbytes < 0 or offset + nbytes > size:
            raise ValueError(f"CUDA block @{offset}+{nbytes} lies outside its region "
                             f"of {size} bytes")
        return device, base + offset

    def _open(self, token: str, offset: int, nbytes: int) -> tuple[int, int, int]:
        device, size, handle = parse_cuda_token(token)
        if offset < 0 or nbytes < 0 or offset + nbytes > size:  # before opening anything
            raise ValueError(f"CUDA block @{offset}+{nbytes} lies outside its region "
                             f"of {size} bytes")
        key = handle.hex()
        with self._lock:
            entry = self._tokens.get(token)
            if entry is not None:
                return entry
            opened = self._opened.get(key)
            if opened is None:
                base, actual = cuda_driver.ipc_open(device, handle)
                opened = self._opened[key] = [base, min(size, actual), 0]
            opened[2] += 1
            entry = self._tokens[token] = (device, opened[0], opened[1])
            return entry

    def locate(self, pointer: int, nbytes: int) -> tuple[str, int] | None:
        """(token, offset) of the mapped block `[pointer, pointer + nbytes)` lies in."""
        with self._lock:
            for token, (_, base, size) in self._tokens.items():
                if base <= pointer and pointer + nbytes <= base + size:
                    return token, pointer - base
        return None

    def drop(self, tokens: list[str] | tuple[str, ...]) -> None:
        """Forget these tokens; an allocation no token names any more is closed."""
        with self._lock:
            for token in tokens:
                entry = self._tokens.pop(token, None)
                if entry is None:
                    continue
                key = token.split(":", 4)[3]
                opened = self._opened[key]
                opened[2] -= 1
                if opened[2] == 0:
                    del self._opened[key]
                    cuda_driver.ipc_close(entry[0], entry[1])

    def drop_prefix(self, prefix: str) -> None:
        """Forget the tokens that start with `prefix`, or whose tag does (a dead stub's
        pool regions are tagged with its pool's prefix)."""
        with self._lock:
            tokens = [t for t in self._tokens
                      if t.startswith(prefix) or t.split(":", 4)[4].startswith(prefix)]
        self.drop(tokens)

    def close(self) -> None:
        with self._lock:
            tokens = list(self._tokens)
        self.drop(tokens)


class DeviceBytes:
    """Stands for `nbytes` of GPU memory where the parent holds a tensor's bytes only to
    check their size: `len()` is the size, and there is no host buffer to read."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes

    def __len__(self) -> int:
        return self.nbytes


class CudaWindow:
    """A client's CUDA shared memory region as the parent keeps it (the interface of
    `shm.client_region.ClientWindow` that shared_memory.py uses): the token the stubs
    map it by, its size, and size-only views."""

    def __init__(self, token: str, size: int) -> None:
        self.name = token
        self.size = size

    def view(self, offset: int, nbytes: int) -> DeviceBytes:
        return DeviceBytes(nbytes)

    def close(self) -> None:
        """Nothing is mapped in the parent."""
