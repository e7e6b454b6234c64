"""Copying a GPU tensor's bytes into shared memory, through the CUDA driver (libcuda).

A model may answer (or call another model) with a tensor on the GPU (`Tensor.from_dlpack`
of a cupy or torch CUDA array). Its bytes reach the parent the way every tensor does: in
the stub's shm pool, copied there once from the device. The driver API is reached with
ctypes, so no GPU framework is needed for the copy and none is imported: the tensor's
framework already loaded the driver and made its memory. The copy runs in the device's
primary context, the one cupy and torch use, so it works from any thread of the stub.

`__dlpack__(stream=None)` made the producer order its work before the legacy default
stream, and cuMemcpyDtoH is synchronous on that stream: the bytes copied are final.
"""

from __future__ import annotations

import ctypes
import threading

_driver: ctypes.CDLL | None = None
_driver_lock = threading.Lock()


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


def check(lib: ctypes.CDLL, result: int, call: str) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        lib.cuGetErrorString(result, ctypes.byref(text))
        reason = text.value.decode() if text.value else f"error {result}"
        raise CudaError(f"{call} failed: {reason}")


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
            lib.cuInit.argtypes = [ctypes.c_uint]
            lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
            lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                                     ctypes.c_int]
            lib.cuDevicePrimaryCtxRelease_v2.argtypes = [ctypes.c_int]
            lib.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
            lib.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
            lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
            lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
            lib.cuDeviceGetCount.argtypes = [ctypes.POINTER(ctypes.c_int)]
            lib.cuDeviceGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                                 ctypes.c_int]
            check(lib, lib.cuInit(0), "cuInit")
            _driver = lib
    return _driver


def copy_to_host(dst_address: int, src_device_pointer: int, nbytes: int,
                 device_id: int) -> None:
    """Copy `nbytes` from GPU `device_id`'s memory at `src_device_pointer` to host
    memory at `dst_address` (a shm block); returns once the bytes are there."""
    if nbytes == 0:
        return
    lib = driver()
    device = ctypes.c_int()
    check(lib, lib.cuDeviceGet(ctypes.byref(device), device_id), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(lib, lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
           "cuDevicePrimaryCtxRetain")
    try:
        check(lib, lib.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
        try:
            check(lib, lib.cuMemcpyDtoH_v2(dst_address, src_device_pointer, nbytes),
                   "cuMemcpyDtoH")
        finally:
            lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        lib.cuDevicePrimaryCtxRelease_v2(device)
