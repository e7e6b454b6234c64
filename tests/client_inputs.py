"""tritonclient inputs straight from numpy arrays (datatype from the array's dtype)."""

from __future__ import annotations

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype


def http_input(name: str, array: np.ndarray, binary: bool = True) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def grpc_input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def typed_input(name: str, array: np.ndarray, datatype: str, module=httpclient):
    """An InferInput of `module` (tritonclient.http or .grpc) with `datatype` as given."""
    tensor = module.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor
