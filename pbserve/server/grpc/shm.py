"""Triton's shared-memory extensions over gRPC: the region RPCs and the tensor
parameters that name a region, with Triton's messages (its ParseSharedMemoryParams and
its SystemSharedMemory* / CudaSharedMemory* handlers). The regions themselves are the
core's (pbserve/core/memory/shared_memory.py)."""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import service_pb2 as pb

from pbserve.core.api import InferenceCore
from pbserve.core.types import ShmRef
from pbserve.errors import invalid_arg

_KINDS = {"shared_memory_region": "string_param", "shared_memory_offset": "int64_param",
          "shared_memory_byte_size": "int64_param"}


def tensor_shm(tensor: Any) -> ShmRef | None:
    """The region an InferInputTensor or InferRequestedOutputTensor names, or None."""
    params = tensor.parameters
    found = {}
    for key, kind in _KINDS.items():
        param = params.get(key)
        if param is None:
            continue
        if key != "shared_memory_region" and "shared_memory_region" not in params:
            raise invalid_arg(f"'{key}' can not be specified without 'shared_memory_region' "
                              f"parameter for tensor '{tensor.name}'")
        if param.WhichOneof("parameter_choice") != kind:
            raise invalid_arg(f"invalid value type for '{key}' parameter for tensor "
                              f"'{tensor.name}', expected {kind}.")
        found[key] = getattr(param, kind)
    if "shared_memory_region" not in found:
        return None
    if "shared_memory_byte_size" not in found:
        raise invalid_arg(f"'shared_memory_byte_size' must be specified along with "
                          f"'shared_memory_region' parameter for tensor '{tensor.name}'")
    return ShmRef(found["shared_memory_region"], found.get("shared_memory_offset", 0),
                  found["shared_memory_byte_size"])


def system_status(core: InferenceCore, request: pb.SystemSharedMemoryStatusRequest
                  ) -> pb.SystemSharedMemoryStatusResponse:
    return _status(pb.SystemSharedMemoryStatusResponse(),
                   core.shared_memory.status(request.name))


def system_register(core: InferenceCore, request: pb.SystemSharedMemoryRegisterRequest
                    ) -> pb.SystemSharedMemoryRegisterResponse:
    core.shared_memory.register(request.name, request.key, request.offset, request.byte_size)
    return pb.SystemSharedMemoryRegisterResponse()


def system_unregister(core: InferenceCore, request: pb.SystemSharedMemoryUnregisterRequest
                      ) -> pb.SystemSharedMemoryUnregisterResponse:
    core.shared_memory.unregister(request.name)
    return pb.SystemSharedMemoryUnregisterResponse()


def cuda_status(core: InferenceCore, request: pb.CudaSharedMemoryStatusRequest
                ) -> pb.CudaSharedMemoryStatusResponse:
    return _status(pb.CudaSharedMemoryStatusResponse(),
                   core.shared_memory.cuda_status(request.name))


def cuda_register(core: InferenceCore, request: pb.CudaSharedMemoryRegisterRequest
                  ) -> pb.CudaSharedMemoryRegisterResponse:
    core.shared_memory.register_cuda(request.name, request.raw_handle, request.device_id,
                                     request.byte_size)
    return pb.CudaSharedMemoryRegisterResponse()


def cuda_unregister(core: InferenceCore, request: pb.CudaSharedMemoryUnregisterRequest
                    ) -> pb.CudaSharedMemoryUnregisterResponse:
    core.shared_memory.unregister_cuda(request.name)
    return pb.CudaSharedMemoryUnregisterResponse()


def _status(response: Any, regions: list[dict[str, Any]]) -> Any:
    """A status response (system or CUDA) listing `regions`, each a dict of its
    RegionStatus fields (shared_memory.py)."""
    for region in regions:
        status = response.regions[region["name"]]
        for field, value in region.items():
            setattr(status, field, value)
    return response
