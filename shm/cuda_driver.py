"""The CUDA driver API (libcuda through ctypes) for moving GPU tensors between processes.

A model's GPU tensors (`Tensor.from_dlpack` of a cupy or torch CUDA array) leave a stub
in one of two ways: copied to the host into the stub's shm pool (`copy`, device to
host), or by CUDA IPC: copied once on the device into a block of the stub's CUDA pool
(shm/cuda_region.py), whose allocation another process opens once by its IPC handle.
No GPU framework is needed for either and none is imported: the tensor's framework
already loaded the driver and made its memory.

Every call runs in the device's primary context, the one cupy and torch use, so a
pointer one of them made is valid here and one opened here is valid for them, from any
thread of the process. Copies run on the legacy default stream and are waited for
before the call returns: `__dlpack__(stream=None)` made the producer order its work
before that stream, and the bytes are final when another process is told about them.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Iterator

_driver: ctypes.CDLL | None = None
_driver_lock = threading.Lock()
_contexts: dict[int, ctypes.c_void_p] = {}  # device -> its retained primary context

HANDLE_BYTES = 64  # sizeof(CUipcMemHandle)
_LAZY_ENABLE_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


def check(lib: ctypes.CDLL, result: int, call: str) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        lib.cuGetErrorString(result, ctypes.byref(text))
        reason = text.value.decode() if text.value else f"error {result}"
        raise CudaError(f"{call} failed: {reason}")


def _declare(lib: ctypes.CDLL) -> None:
    u64, size, ptr, c_int = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int
    signatures = {
        "cuInit": [ctypes.c_uint],
        "cuDeviceGet": [ctypes.POINTER(c_int), c_int],
        "cuDeviceGetCount": [ctypes.POINTER(c_int)],
        "cuDeviceGetAttribute": [ctypes.POINTER(c_int), c_int, c_int],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(ptr), c_int],
        "cuCtxPushCurrent_v2": [ptr],
        "cuCtxPopCurrent_v2": [ctypes.POINTER(ptr)],
        "cuGetErrorString": [c_int, ctypes.POINTER(ctypes.c_char_p)],
        "cuMemAlloc_v2": [ctypes.POINTER(u64), size],
        "cuMemFree_v2": [u64],
        "cuMemcpyAsync": [u64, u64, size, ptr],
        "cuStreamSynchronize": [ptr],
        "cuMemGetAddressRange_v2": [ctypes.POINTER(u64), ctypes.POINTER(size), u64],
        "cuIpcGetMemHandle": [ctypes.POINTER(_IpcHandle), u64],
        "cuIpcOpenMemHandle_v2": [ctypes.POINTER(u64), _IpcHandle, ctypes.c_uint],
        "cuIpcCloseMemHandle": [u64],
    }
    for name, argtypes in signatures.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = c_int


def driver() -> ctypes.CDLL:
    """libcuda, initialised once per process; CudaError where there is none."""
    global _driver
    with _driver_lock:
        if _driver is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise CudaError(f"a GPU tensor needs the CUDA driver (libcuda.so.1): {exc}") \
                    from None
            _declare(lib)
            check(lib, lib.cuInit(0), "cuInit")
            _driver = lib
    return _driver


@functools.cache
def device_count() -> int:
    """The CUDA devices this process sees (CUDA_VISIBLE_DEVICES honoured); 0 without a
    driver. Asked once per process."""
    try:
        lib = driver()
    except CudaError:
        return 0
    count = ctypes.c_int()
    return count.value if lib.cuDeviceGetCount(ctypes.byref(count)) == 0 else 0


@contextlib.contextmanager
def on_device(device_id: int) -> Iterator[ctypes.CDLL]:
    """The driver, with `device_id`'s primary context current on this thread. The
    context is retained once per process and kept: the pool's memory lives in it."""
    lib = driver()
    context = _contexts.get(device_id)
    if context is None:
        with _driver_lock:
            context = _contexts.get(device_id)
            if context is None:
                device = ctypes.c_int()
                check(lib, lib.cuDeviceGet(ctypes.byref(device), device_id), "cuDeviceGet")
                context = ctypes.c_void_p()
                check(lib, lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
                      "cuDevicePrimaryCtxRetain")
                _contexts[device_id] = context
    check(lib, lib.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
    try:
        yield lib
    finally:
        lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def copy(device_id: int, dst: int, src: int, nbytes: int) -> None:
    """Copy `nbytes` from `src` to `dst`, each a device pointer or a host address (the
    driver tells them apart: unified addressing); returns once the bytes are there."""
    if nbytes == 0:
        return
    with on_device(device_id) as lib:
        check(lib, lib.cuMemcpyAsync(dst, src, nbytes, None), "cuMemcpyAsync")
        check(lib, lib.cuStreamSynchronize(None), "cuStreamSynchronize")


def alloc(device_id: int, nbytes: int) -> int:
    """`nbytes` of device memory (cuMemAlloc: its own allocation, so its own handle)."""
    with on_device(device_id) as lib:
        pointer = ctypes.c_uint64()
        check(lib, lib.cuMemAlloc_v2(ctypes.byref(pointer), max(nbytes, 1)),
              f"cuMemAlloc of {nbytes} bytes on GPU {device_id}")
        return pointer.value


def free(device_id: int, pointer: int) -> None:
    with on_device(device_id) as lib:
        check(lib, lib.cuMemFree_v2(pointer), "cuMemFree")


def ipc_handle(device_id: int, pointer: int) -> bytes:
    """The IPC handle of the allocation starting at `pointer` (64 bytes)."""
    with on_device(device_id) as lib:
        handle = _IpcHandle()
        check(lib, lib.cuIpcGetMemHandle(ctypes.byref(handle), pointer), "cuIpcGetMemHandle")
        return ctypes.string_at(ctypes.addressof(handle), HANDLE_BYTES)  # NULs and all


def ipc_open(device_id: int, handle: bytes) -> tuple[int, int]:
    """Map another process's allocation by its IPC handle: (pointer, its size)."""
    if len(handle) != HANDLE_BYTES:
        raise CudaError(f"a CUDA IPC handle has {HANDLE_BYTES} bytes, not {len(handle)}")
    with on_device(device_id) as lib:
        pointer, raw = ctypes.c_uint64(), _IpcHandle()
        ctypes.memmove(ctypes.addressof(raw), handle, HANDLE_BYTES)
        check(lib, lib.cuIpcOpenMemHandle_v2(ctypes.byref(pointer), raw,
                                             _LAZY_ENABLE_PEER_ACCESS),
              "cuIpcOpenMemHandle")
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        check(lib, lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                               pointer.value), "cuMemGetAddressRange")
        return pointer.value, size.value


def ipc_close(device_id: int, pointer: int) -> None:
    with on_device(device_id) as lib:
        check(lib, lib.cuIpcCloseMemHandle(pointer), "cuIpcCloseMemHandle")

