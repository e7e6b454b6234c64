"""Moving pb_utils tensors in and out of shared memory on the stub side."""

from __future__ import annotations

import numpy as np

from backend_utils.tensor import Tensor
from shm.pool import Block, Pool, RegionMap
from shm.cuda_region import is_cuda_token
from shm.tensor import NUMPY_OF_DATATYPE, element_count
from stub.borrowed import BorrowedBlocks
from shm import cuda_driver
from stub.gpu_memory import GpuMemory


LEND_MIN_BYTES = 64 * 1024  # below this a copy costs less than the bookkeeping


def input_tensors(descs: tuple, regions: RegionMap, lend_to: BorrowedBlocks | None = None,
                  lent: list | None = None, gpu: GpuMemory | None = None,
                  gpu_inputs: bool = False) -> list[Tensor]:
    """pb_utils Tensors viewing the parent's buffers (no copy, BYTES parsed). With
    `lend_to`, large numeric inputs may be handed back as outputs without a copy, until
    the keys appended to `lent` are unregistered (when the request's answer is made).
    An input in GPU memory (a CUDA token) stays there with `gpu_inputs` (the model's
    FORCE_CPU_ONLY_INPUT_TENSORS "no"; not BYTES), else it is copied to the host."""
    tensors = []
    for desc in descs:
        name, datatype, shape, region, offset, nbytes = desc
        if is_cuda_token(region):
            tensors.append(_gpu_input(desc, gpu, gpu_inputs, lent))
            continue
        buffer = regions.view(region, offset, nbytes)
        if lend_to is not None and nbytes >= LEND_MIN_BYTES and datatype in NUMPY_OF_DATATYPE \
                and datatype != "BYTES":
            base = np.frombuffer(buffer, NUMPY_OF_DATATYPE[datatype], element_count(shape))
            pointer = lend_to.register(base, region, offset, nbytes, keep=False)
            if pointer is not None and lent is not None:
                lent.append(pointer)
            tensor = Tensor._from_numpy_view(name, base.reshape(shape), datatype)
        else:
            tensor = Tensor._from_triton(name, datatype, shape, buffer)
        # A BLS call may forward this input as it is: its bytes already are in shm.
        tensor._shm_desc = tuple(desc)
        tensors.append(tensor)
    return tensors


def _gpu_input(desc: tuple, gpu: GpuMemory | None, gpu_inputs: bool,
               lent: list | None) -> Tensor:
    name, datatype, shape, region, offset, nbytes = desc
    assert gpu is not None
    if not gpu_inputs or datatype == "BYTES":
        tensor = gpu.host_tensor(name, datatype, shape, region, offset, nbytes)
    else:
        tensor, _ = gpu.device_tensor(name, datatype, shape, region, offset, nbytes)
        if lent is not None and nbytes:
            lent.append(gpu.lend_input(tensor._gpu[0].data_ptr, nbytes, desc))
    tensor._shm_desc = tuple(desc)  # a BLS call may forward it as it is
    return tensor


def output_desc(tensor: Tensor, pool: Pool, borrowed: BorrowedBlocks | None = None,
                gpu: GpuMemory | None = None) -> tuple:
    """Copy one output into the stub's pool (or name the BLS output block it already
    is, see stub/borrowed.py); its descriptor as a plain tuple. A GPU tensor goes by
    CUDA IPC with `gpu` (the consumer is a stub that takes GPU tensors), else it is
    copied to the host."""
    array = tensor._array  # None for a GPU tensor
    # A numpy shape already is a tuple of ints; a DLPack one may not be.
    shape = array.shape if array is not None else tuple(int(d) for d in tensor.shape())
    datatype = tensor._triton_datatype_name()
    if borrowed is not None and array is not None and datatype != "BYTES":
        location = borrowed.lend(array)
        if location is not None:
            return (tensor.name(), datatype, shape, *location)
    if array is None:
        block = gpu.export(tensor) if gpu is not None else _store_from_gpu(tensor, pool)
    else:
        block = pool.store(tensor._raw_bytes())  # one memcpy, no numpy objects on the way
    return (tensor.name(), datatype, shape, block.region, block.offset, block.nbytes)


def output_nbytes(tensor: Tensor) -> int:
    """The size of an output's bytes in Triton's layout (BYTES serialized once)."""
    if tensor._gpu is not None:
        return tensor._gpu[0].nbytes
    return tensor._raw_bytes().nbytes


def output_into_region(tensor: Tensor, destination: tuple[str, int, int],
                       regions: RegionMap, gpu: GpuMemory | None = None) -> tuple:
    """Write one output straight into the client's region (one copy, from the model's
    array or GPU tensor); its descriptor names the window. The caller checked that it
    fits. A client's CUDA region (a CUDA token) is written through `gpu`."""
    token, offset, _ = destination
    array = tensor._array
    shape = array.shape if array is not None else tuple(int(d) for d in tensor.shape())
    nbytes = output_nbytes(tensor)
    if nbytes and is_cuda_token(token):
        assert gpu is not None
        gpu.write(destination, tensor)
    elif nbytes:
        target = regions.view(token, offset, nbytes)
        if array is None:
            info = tensor._gpu[0]
            address = np.frombuffer(target, np.uint8).ctypes.data
            cuda_driver.copy(info.device_id, address, info.data_ptr, nbytes)
        else:
            target[:] = tensor._raw_bytes()
    return (tensor.name(), tensor._triton_datatype_name(), shape, token, offset, nbytes)


def _store_from_gpu(tensor: Tensor, pool: Pool) -> Block:
    """A block holding a copy of a GPU tensor's bytes, copied from the device straight
    into the mapping (stub/cuda_copy.py); the block is freed if the copy fails."""
    info = tensor._gpu[0]
    block = pool.alloc(info.nbytes)
    try:
        if info.nbytes:
            address = np.frombuffer(pool.view(block), np.uint8).ctypes.data
            cuda_driver.copy(info.device_id, address, info.data_ptr, info.nbytes)
    except BaseException:
        pool.free(block.region, block.offset)
        raise
    return block
