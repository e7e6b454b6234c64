"""Moving pb_utils tensors in and out of shared memory on the stub side."""

from __future__ import annotations

import numpy as np

from backend_utils.tensor import Tensor
from shm.pool import Pool, RegionMap
from shm.tensor import NUMPY_OF_DATATYPE, TensorDesc, element_count
from stub.borrowed import BorrowedBlocks


LEND_MIN_BYTES = 64 * 1024  # below this a copy costs less than the bookkeeping


def input_tensors(descs: tuple, regions: RegionMap, lend_to: BorrowedBlocks | None = None,
                  lent: list[int] | None = None) -> list[Tensor]:
    """pb_utils Tensors viewing the parent's buffers (no copy, BYTES parsed). With
    `lend_to`, large numeric inputs may be handed back as outputs without a copy, until
    the keys appended to `lent` are unregistered (when the request's answer is made)."""
    tensors = []
    for name, datatype, shape, region, offset, nbytes in descs:
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
        tensor._shm_desc = (name, datatype, shape, region, offset, nbytes)
        tensors.append(tensor)
    return tensors


def output_desc(tensor: Tensor, pool: Pool, borrowed: BorrowedBlocks | None = None) -> tuple:
    """Copy one output into the stub's pool (or name the BLS output block it already
    is, see stub/borrowed.py); its descriptor as a plain tuple."""
    shape = tuple(int(d) for d in tensor.shape())
    if borrowed is not None and tensor.is_cpu() and tensor._triton_datatype_name() != "BYTES":
        location = borrowed.lend(tensor._array)
        if location is not None:
            return (tensor.name(), tensor._triton_datatype_name(), shape, *location)
    raw = tensor._raw_bytes()
    if raw.format != "B" or raw.ndim != 1:
        raw = raw.cast("B")
    block = pool.alloc(raw.nbytes)
    if raw.nbytes:
        pool.view(block)[:] = raw  # one memcpy, no numpy objects on the way
    return tuple(TensorDesc(tensor.name(), tensor._triton_datatype_name(), shape,
                            block.region, block.offset, raw.nbytes))

