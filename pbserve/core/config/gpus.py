"""The GPUs models may use: what makes pbserve a GPU build of Triton or a CPU-only one.

Asked of the CUDA driver (libcuda through ctypes, no framework), once per process; the
driver honours CUDA_VISIBLE_DEVICES. Without a driver or a device the list is empty, and
configs are completed and checked as a CPU-only Triton does (KIND_GPU is refused).
"""

from __future__ import annotations

import ctypes
import functools

from pbserve.core.config.config_checks import MIN_COMPUTE_CAPABILITY
from shm.cuda_driver import device_count, driver

_MAJOR = 75  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
_MINOR = 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR


@functools.cache
def visible_gpus() -> list[int]:
    """Ids of the CUDA devices with Triton's minimum compute capability."""
    count = device_count()
    if not count:
        return []
    lib = driver()
    usable = []
    for device in range(count):
        major, minor = ctypes.c_int(), ctypes.c_int()
        if lib.cuDeviceGetAttribute(ctypes.byref(major), _MAJOR, device) == 0 and \
                lib.cuDeviceGetAttribute(ctypes.byref(minor), _MINOR, device) == 0 and \
                major.value + minor.value / 10 >= MIN_COMPUTE_CAPABILITY:
            usable.append(device)
    return usable
