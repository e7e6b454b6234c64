"""`Tensor`: a named array, the unit of every request input and response output.

CPU tensors are numpy arrays, never copied when already C-contiguous, so the stub
can hand out views over shared memory and a model's outputs can be written to the
pool straight from the array. GPU tensors only exist through DLPack; they keep the
producer's memory alive and can be exported again, but cannot become numpy arrays.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _dlpack
from ._strings import as_str
from .dtypes import (
    TYPE_BF16,
    TYPE_BOOL,
    TYPE_BYTES,
    TYPE_FP16,
    TYPE_FP32,
    TYPE_FP64,
    TYPE_INT8,
    TYPE_INT16,
    TYPE_INT32,
    TYPE_INT64,
    TYPE_UINT8,
    TYPE_UINT16,
    TYPE_UINT32,
    TYPE_UINT64,
    _code_of_dtype,
    _code_of_name,
    _deserialize_bytes,
    _name_of_code,
    _serialize_bytes,
    _storage_dtype,
)
from .error import TritonModelException

# Triton code <-> DLPack (type code, bits).
_TO_DLPACK: dict[int, tuple[int, int]] = {
    TYPE_BOOL: (_dlpack.CODE_BOOL, 8),
    TYPE_UINT8: (_dlpack.CODE_UINT, 8),
    TYPE_UINT16: (_dlpack.CODE_UINT, 16),
    TYPE_UINT32: (_dlpack.CODE_UINT, 32),
    TYPE_UINT64: (_dlpack.CODE_UINT, 64),
    TYPE_INT8: (_dlpack.CODE_INT, 8),
    TYPE_INT16: (_dlpack.CODE_INT, 16),
    TYPE_INT32: (_dlpack.CODE_INT, 32),
    TYPE_INT64: (_dlpack.CODE_INT, 64),
    TYPE_FP16: (_dlpack.CODE_FLOAT, 16),
    TYPE_FP32: (_dlpack.CODE_FLOAT, 32),
    TYPE_FP64: (_dlpack.CODE_FLOAT, 64),
    TYPE_BF16: (_dlpack.CODE_BFLOAT, 16),
}
_FROM_DLPACK: dict[tuple[int, int], int] = {dl: code for code, dl in _TO_DLPACK.items()}

_GPU_NUMPY_ERROR = "Tensor is stored in GPU and cannot be converted to NumPy."


def _check_name(name: Any) -> str:
    name = as_str("Tensor name", name)
    if name == "":
        raise TritonModelException("Tensor name cannot be an empty string.")
    return name


def _is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


class Tensor:
    """A named tensor: `Tensor(name, numpy_array)` or `Tensor.from_dlpack(name, obj)`."""

    # `_shm_desc`: where the bytes already are in shared memory (set by the stub for
    # inputs it received), so that a BLS call can forward the tensor without a copy.
    __slots__ = ("_name", "_dtype", "_array", "_serialized", "_gpu", "_shm_desc", "__weakref__")

    _name: str
    _dtype: int
    _array: np.ndarray | None
    _serialized: bytes | None
    _gpu: tuple[_dlpack.DLInfo, Any] | None

    def __init__(self, name: str, numpy_array: np.ndarray) -> None:
        # The data's type first, as Triton's binding: Tensor("", None) is a TypeError.
        if not isinstance(numpy_array, np.ndarray):
            raise TypeError(
                f"Tensor data must be a numpy.ndarray, got {type(numpy_array).__name__}"
            )
        name = _check_name(name)
        code = _code_of_dtype(numpy_array.dtype)
        if code is None:
            raise TritonModelException("NumPy dtype is not supported.")
        if not numpy_array.flags.c_contiguous:
            numpy_array = np.ascontiguousarray(numpy_array)
        self._set_cpu(name, code, numpy_array)
        if code == TYPE_BYTES:
            # Serialised now, as Triton does: later edits to the array are not sent.
            self._serialized = _serialize_bytes(numpy_array)

    # -- internal constructors (used by the stub) ---------------------------------

    @classmethod
    def _from_numpy_view(
        cls, name: str, array: np.ndarray, datatype: str | None = None
    ) -> Tensor:
        """Wrap `array` as is: no copy, no contiguity or dtype checks.

        `datatype` overrides the Triton type derived from the array's dtype, e.g.
        "BF16" for a uint16 array holding bfloat16 bits.
        """
        tensor = cls.__new__(cls)
        code = _code_of_name(datatype) if datatype is not None else _code_of_dtype(array.dtype)
        if code is None:
            raise TritonModelException("NumPy dtype is not supported.")
        tensor._set_cpu(name, code, array)
        return tensor

    @classmethod
    def _from_triton(
        cls, name: str, datatype_name: str, shape: Any, buffer: Any
    ) -> Tensor:
        """A tensor over a raw little-endian buffer in Triton's layout (zero-copy for
        fixed-size types; BYTES elements are parsed into an object array of bytes).

        `buffer` may be longer than the tensor (a pool slot); a shorter one is an error.
        """
        code = _code_of_name(datatype_name)
        dims = tuple(map(int, shape))
        count = math.prod(dims)
        if code == TYPE_BYTES:
            array = _deserialize_bytes(buffer, count).reshape(dims)
        else:
            dtype = _storage_dtype(code)
            try:
                # Positional: numpy parses keyword arguments slower than it reads the data.
                array = np.frombuffer(buffer, dtype, count)
            except ValueError as exc:
                raise TritonModelException(
                    f"Tensor '{name}' ({datatype_name}, shape {list(dims)}) needs "
                    f"{count * dtype.itemsize} bytes: {exc}"
                ) from None
            if len(dims) != 1:  # frombuffer made it 1-D already
                array = array.reshape(dims)
        tensor = cls.__new__(cls)
        tensor._set_cpu(name, code, array)
        return tensor

    def _set_cpu(self, name: str, code: int, array: np.ndarray) -> None:
        self._name = name
        self._dtype = code
        self._array = array
        self._serialized = None
        self._gpu = None
        self._shm_desc = None

    # -- public API ---------------------------------------------------------------

    def name(self) -> str:
        return self._name

    def triton_dtype(self) -> int:
        """TRITONSERVER_DataType code (BOOL=1 .. BYTES=13, BF16=14)."""
        return self._dtype

    def shape(self) -> list[int]:
        if self._gpu is not None:
            return list(self._gpu[0].shape)
        assert self._array is not None
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return self._gpu is None

    def as_numpy(self) -> np.ndarray:
        """The array itself (a view for shared-memory inputs, valid while the tensor lives)."""
        if self._gpu is not None:
            raise TritonModelException(_GPU_NUMPY_ERROR)
        if self._dtype == TYPE_BF16:
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. "
                "Use to_dlpack() and from_dlpack() instead."
            )
        assert self._array is not None
        return self._array

    def to_dlpack(self) -> Any:
        """A "dltensor" capsule over this tensor's memory; keeps the tensor alive."""
        if self._dtype == TYPE_BYTES:
            raise TritonModelException("DLPack does not have support for string tensors.")
        code, bits = _TO_DLPACK[self._dtype]
        if self._gpu is not None:
            info = self._gpu[0]
            return _dlpack.make_capsule(
                data_ptr=info.data_ptr, shape=info.shape, strides=None, code=code,
                bits=bits, device_type=info.device_type, device_id=info.device_id,
                owner=self,
            )
        array = self._array
        assert array is not None
        strides = None
        if not array.flags.c_contiguous:
            strides = tuple(s // array.itemsize for s in array.strides)
        return _dlpack.make_capsule(
            data_ptr=array.ctypes.data, shape=tuple(array.shape), strides=strides,
            code=code, bits=bits, device_type=_dlpack.DEVICE_CPU, device_id=0, owner=self,
        )

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """DLPack producer protocol; no pending work exists, so `stream` needs no sync."""
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._gpu is not None:
            return (self._gpu[0].device_type, self._gpu[0].device_id)
        return (_dlpack.DEVICE_CPU, 0)

    @classmethod
    def from_dlpack(cls, name: str, tensor: Any) -> Tensor:
        """Zero-copy import of a DLPack capsule or of an object with `__dlpack__`."""
        name = _check_name(name)
        if _is_capsule(tensor):
            capsule = tensor
        else:
            if not (hasattr(tensor, "__dlpack__") and hasattr(tensor, "__dlpack_device__")):
                raise TritonModelException(
                    "Provided tensor is not supported. Tensor must be a DLPack capsule "
                    "or have `__dlpack__` and `__dlpack_device__` attributes"
                )
            device_type, _ = tensor.__dlpack_device__()
            if device_type not in (
                _dlpack.DEVICE_CPU, _dlpack.DEVICE_CUDA, _dlpack.DEVICE_CUDA_HOST
            ):
                raise TritonModelException(
                    f"DLDevice type {int(device_type)} is not support by Python backend."
                )
            # stream=None: for CUDA the producer orders its work before the legacy
            # default stream, which is what later copies of this memory use.
            capsule = tensor.__dlpack__(stream=None)
        try:
            info, owner = _dlpack.consume_capsule(capsule)
        except ValueError as exc:
            raise TritonModelException(f"Provided DLPack capsule is not supported: {exc}") from None
        return cls._from_dl_info(name, info, owner)

    @classmethod
    def _from_dl_info(cls, name: str, info: _dlpack.DLInfo, owner: Any) -> Tensor:
        if not _dlpack.is_c_contiguous(info.shape, info.strides):
            raise TritonModelException(
                "DLPack tensor is not contiguous. Only contiguous DLPack tensors "
                "that are stored in C-Order are supported."
            )
        if info.device_type not in (
            _dlpack.DEVICE_CPU, _dlpack.DEVICE_CUDA, _dlpack.DEVICE_CUDA_HOST
        ):
            raise TritonModelException(
                f"DLDevice type {info.device_type} is not support by Python backend."
            )
        if info.code == _dlpack.CODE_BFLOAT and info.bits != 16:
            raise TritonModelException(
                f"Expected BF16 tensor to have 16 bits, but had: {info.bits}"
            )
        code = _FROM_DLPACK.get((info.code, info.bits)) if info.lanes == 1 else None
        if code is None:
            raise TritonModelException(
                f"DLPack data type (code {info.code}, bits {info.bits}, lanes "
                f"{info.lanes}) is not supported."
            )
        tensor = cls.__new__(cls)
        if info.device_type == _dlpack.DEVICE_CUDA:
            tensor._name = name
            tensor._dtype = code
            tensor._array = None
            tensor._serialized = None
            tensor._gpu = (info, owner)
            tensor._shm_desc = None
            return tensor
        dtype = _storage_dtype(code)
        if info.nbytes == 0:
            owner.release()
            array = np.empty(info.shape, dtype=dtype)
        else:
            buffer = _dlpack.cpu_buffer(info, owner)
            array = np.frombuffer(buffer, dtype=dtype).reshape(info.shape)
        tensor._set_cpu(name, code, array)
        return tensor

    # -- internal accessors (used by the stub) --------------------------------------

    def _triton_datatype_name(self) -> str:
        """Wire name of the datatype: "FP32", "BYTES", "BF16", ..."""
        return _name_of_code(self._dtype)

    def _raw_bytes(self) -> memoryview:
        """The tensor's bytes in Triton's layout (C order; BYTES length-prefixed), as a
        1-D memoryview of unsigned bytes (no copy of a C-contiguous array)."""
        if self._gpu is not None:
            raise TritonModelException(_GPU_NUMPY_ERROR)
        array = self._array
        assert array is not None
        if self._dtype == TYPE_BYTES:
            if self._serialized is None:
                self._serialized = _serialize_bytes(array)
            return memoryview(self._serialized)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        if array.size == 0:  # memoryview.cast refuses a shape with a zero in it
            return memoryview(array.reshape(-1).view(np.uint8))
        return memoryview(array).cast("B")

    def _device(self) -> tuple[int, int]:
        """(DLPack device type, device id): (1, 0) for CPU, (2, n) for CUDA device n."""
        return self.__dlpack_device__()

    def _gpu_data_ptr(self) -> int:
        """Device pointer of a GPU tensor (the producer's memory, kept alive by us)."""
        if self._gpu is None:
            raise TritonModelException("Tensor is stored in CPU memory.")
        return self._gpu[0].data_ptr

    def __repr__(self) -> str:
        where = "cpu" if self._gpu is None else f"cuda:{self._gpu[0].device_id}"
        return (
            f"Tensor({self._name!r}, {self._triton_datatype_name()}, "
            f"shape={self.shape()}, {where})"
        )
