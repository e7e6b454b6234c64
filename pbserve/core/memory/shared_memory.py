"""Triton's shared-memory extensions: the regions clients registered, by name.

System shared memory: a client creates a POSIX segment, registers a window of it
(`key`, `offset`, `byte_size`) under a name, and names that region in an input's or
output's `shared_memory_region` parameter. The parent maps the window at registration
(shm/client_region.py); the stubs map it from the descriptor's token when a request
first names it, read inputs straight from it and write outputs straight into it.

A request holds each region it names until it completes (its final response, an error,
or its stub's death). Unregistering a region in use only marks it: it goes when its
last request completes, as in Triton (it stays visible to status and to new requests
until then). Going means: the parent unmaps its window and tells every stub to drop
theirs (`on_unmapped(token)`).

CUDA shared memory: a client registers a device allocation by its CUDA IPC handle (raw
bytes from `cudaIpcGetMemHandle`), device and size. The parent opens the handle once to
check it (Triton's errors), then closes it: the stubs map it from the descriptor's CUDA
token (shm/cuda_region.py) and read inputs from it or write outputs into it on the
device. Both kinds share one namespace of region names, as in Triton. Without a GPU,
registering is refused in the words of a Triton build without GPUs.
Everything here runs on the event loop's thread.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pbserve.core.types import InferRequest, ShmRef
from pbserve.errors import ErrorCode, ServerError, invalid_arg, not_found
from shm import cuda_driver
from shm.client_region import ClientRegionError, ClientWindow, client_token
from shm.cuda_region import CLIENT_TAG, CudaWindow, cuda_token
from shm.pool import RegionMap

# Keys naming pbserve's own segments and semaphores (and Triton's python backend's):
# a client may not map the server's memory.
RESERVED_KEY_PREFIXES = ("pbserve-", "sem.pbserve-", "triton_python_backend_shm_region_")
CLIENT_SHM_DISABLED = ("Client shared memory is disabled. Start the server with "
                       "'--allow-client-shm=true' to enable.")


@dataclass
class _Region:
    name: str
    key: str
    offset: int
    byte_size: int
    window: ClientWindow | CudaWindow
    uses: int = 0  # requests holding it
    unregistering: bool = False
    device_id: int = -1  # a CUDA region's device; -1 for system shared memory

    @property
    def token(self) -> str:
        return self.window.name

    @property
    def is_cuda(self) -> bool:
        return self.device_id >= 0

    def status(self) -> dict[str, Any]:
        if self.is_cuda:
            return {"name": self.name, "device_id": self.device_id,
                    "byte_size": self.byte_size}
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}


class SharedMemoryManager:
    def __init__(self, regions: RegionMap, on_unmapped: Callable[[str], None],
                 allow_client_shm: bool = True,
                 gpus: Callable[[], list[int]] = lambda: [],
                 refusal: str = CLIENT_SHM_DISABLED) -> None:
        """`refusal`: the error's words when client regions are refused (the flag's by
        default; a frontend of the request plane says why it has none)."""
        self._map = regions  # the parent's RegionMap: windows are viewed through it
        self._on_unmapped = on_unmapped
        self.allow_client_shm = allow_client_shm
        self._refusal = refusal
        self._gpus = gpus
        self._regions: dict[str, _Region] = {}
        self._serials = itertools.count(1)

    # -- system shared memory: the extension's API --------------------------------------
    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.check_allowed()
        if not name:
            raise invalid_arg("'region name' is necessary to register system shared memory "
                              "region")
        _check_key(name, key)
        if name in self._regions:
            raise ServerError(ErrorCode.ALREADY_EXISTS,
                              f"shared memory region '{name}' already in manager")
        token = client_token(next(self._serials), key, offset, byte_size)
        try:
            window = ClientWindow.open(key, offset, byte_size, name=token)
        except ClientRegionError as err:
            if err.reason == "open":
                raise ServerError(ErrorCode.INTERNAL,
                                  f"Unable to open shared memory region: '{key}'") from None
            detail = "invalid args" if err.reason == "size" else \
                f"unable to process address space{err}"
            raise invalid_arg(f"failed to register shared memory region '{name}': "
                              f"{detail}") from None
        self._regions[name] = _Region(name, key, offset, byte_size, window)
        self._map.add(window)

    def status(self, name: str = "") -> list[dict[str, Any]]:
        if not name:
            return [r.status() for r in self._regions.values() if not r.is_cuda]
        region = self._regions.get(name)
        if region is None or region.is_cuda:
            raise not_found(f"Unable to find system shared memory region: '{name}'")
        return [region.status()]

    def unregister(self, name: str = "", cuda: bool = False) -> None:
        """One region, or every one ("" names none), of system (or CUDA) shared memory;
        an unknown name is no error."""
        self.check_allowed()
        if name:
            targets = [self._regions[name]] if name in self._regions else []
        else:
            targets = list(self._regions.values())
        for region in targets:
            if region.is_cuda != cuda:
                continue
            region.unregistering = True
            if region.uses == 0:
                self._drop(region)

    # -- CUDA shared memory -----------------------------------------------------------
    def cuda_status(self, name: str = "") -> list[dict[str, Any]]:
        if not name:
            return [r.status() for r in self._regions.values() if r.is_cuda]
        region = self._regions.get(name)
        if region is None or not region.is_cuda:
            raise not_found(f"Unable to find cuda shared memory region: '{name}'")
        return [region.status()]

    def register_cuda(self, name: str, raw_handle: bytes = b"", device_id: int = 0,
                      byte_size: int = 0) -> None:
        """Triton's RegisterCUDASharedMemory: the handle is opened once, to check it."""
        self.check_allowed()
        if not name:
            raise invalid_arg("'region name' is necessary to register cuda shared memory "
                              "region")
        if not self._gpus():
            raise invalid_arg(f"failed to register CUDA shared memory region: '{name}', "
                              f"GPUs not supported")
        if name in self._regions:
            raise ServerError(ErrorCode.ALREADY_EXISTS,
                              f"shared memory region '{name}' already in manager")
        if device_id not in self._gpus():
            raise invalid_arg(f"failed to register CUDA shared memory region '{name}': "
                              f"invalid device id {device_id}")
        if len(raw_handle) != cuda_driver.HANDLE_BYTES:
            raise invalid_arg(f"failed to register CUDA shared memory region '{name}': "
                              f"the raw handle has {len(raw_handle)} bytes, a CUDA IPC "
                              f"handle has {cuda_driver.HANDLE_BYTES}")
        try:
            pointer, size = cuda_driver.ipc_open(device_id, raw_handle)
            cuda_driver.ipc_close(device_id, pointer)
        except cuda_driver.CudaError as err:
            raise ServerError(ErrorCode.INTERNAL, f"failed to open CUDA IPC handle: "
                              f"{str(err).split(': ', 1)[-1]}") from None
        if byte_size > size:
            raise invalid_arg(f"failed to register CUDA shared memory region '{name}': "
                              f"byte_size {byte_size} exceeds the allocation's {size} bytes")
        token = cuda_token(device_id, byte_size, raw_handle, f"{CLIENT_TAG}{next(self._serials)}")
        self._regions[name] = _Region(name, "", 0, byte_size, CudaWindow(token, byte_size),
                                      device_id=device_id)

    def unregister_cuda(self, name: str = "") -> None:
        self.unregister(name, cuda=True)

    # -- inference --------------------------------------------------------------------
    def resolve(self, request: InferRequest) -> None:
        """Point the request's shared-memory inputs and outputs at their windows (an
        input's `data` becomes a view of its bytes, for validation) and hold their
        regions until `request.release_shm()`; Triton's errors for unknown regions and
        offsets or sizes outside them."""
        held: list[_Region] = []
        try:
            for tensor in request.inputs:
                if tensor.shm is not None:
                    region = self._use(tensor.shm, held)
                    if region.is_cuda and tensor.datatype == "BYTES":
                        raise invalid_arg(f"input '{tensor.name}': BYTES tensors in CUDA "
                                          f"shared memory are not supported")
                    tensor.data = region.window.view(tensor.shm.offset, tensor.shm.byte_size)
            for ref in (request.output_shm or {}).values():
                self._use(ref, held)
        except BaseException:
            self._release(held)
            raise
        if held:  # after whatever the request's maker asked to be told (frontends/)
            then = request._shm_release

            def release() -> None:
                self._release(held)
                if then is not None:
                    then()
            request._shm_release = release

    def _use(self, ref: ShmRef, held: list[_Region]) -> _Region:
        name = ref.region
        region = self._regions.get(name)
        if region is None:
            raise not_found(f"Unable to find shared memory region: '{name}'")
        if not 0 <= ref.offset < region.byte_size:
            raise invalid_arg(f"Invalid offset for shared memory region: '{name}'")
        if ref.byte_size < 0 or ref.offset + ref.byte_size > region.byte_size:
            raise invalid_arg(f"Invalid offset + byte size for shared memory region: "
                              f"'{name}'")
        ref.token = region.token
        region.uses += 1
        held.append(region)
        return region

    def _release(self, held: list[_Region]) -> None:
        for region in held:
            region.uses -= 1
            if region.uses == 0 and region.unregistering:
                self._drop(region)

    # -- lifetime ---------------------------------------------------------------------
    def close(self) -> None:
        """Server exit: unmap every window, in use or not."""
        for region in list(self._regions.values()):
            self._drop(region)

    def _drop(self, region: _Region) -> None:
        if self._regions.get(region.name) is not region:
            return
        del self._regions[region.name]
        self._map.forget(region.token)
        self._on_unmapped(region.token)

    def check_allowed(self) -> None:
        """UNSUPPORTED, in Triton's words, when the server refuses client regions."""
        if not self.allow_client_shm:
            raise ServerError(ErrorCode.UNSUPPORTED, self._refusal)


def _check_key(name: str, key: str) -> None:
    """Triton's ValidateSharedMemoryKey, with pbserve's own names reserved too."""
    bare = key.lstrip("/")
    if not bare:
        raise invalid_arg(f"cannot register shared memory region '{name}' - invalid shm key "
                          f"'{key}'")
    for prefix in RESERVED_KEY_PREFIXES:
        if bare.startswith(prefix):
            raise invalid_arg(f"cannot register shared memory region '{name}' with key "
                              f"'{key}' as the key contains the reserved prefix '{prefix}'")
