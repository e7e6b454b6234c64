"""DLPack capsules in pure Python (ctypes), so tensors cross to torch/cupy/numpy zero-copy.

numpy's own exporter refuses read-only arrays (shared-memory views often are) and
knows no BF16, and a bare capsule cannot be handed to `np.from_dlpack`, so both
directions are done here over the legacy `DLManagedTensor` ABI ("dltensor").
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass
from typing import Any

# DLDeviceType values Triton accepts.
DEVICE_CPU = 1
DEVICE_CUDA = 2
DEVICE_CUDA_HOST = 3

# DLDataTypeCode values.
CODE_INT = 0
CODE_UINT = 1
CODE_FLOAT = 2
CODE_BFLOAT = 4
CODE_BOOL = 6

_NAME = b"dltensor"
_USED_NAME = b"used_dltensor"


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


# Own prototypes (not ctypes.pythonapi's shared function objects, whose argtypes
# other libraries may set differently). PYFUNCTYPE keeps the GIL and raises on error.
_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", _api))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _api)
)
# Used from the capsule destructor, where the capsule is dying: raw pointers only.
_capsule_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_capsule_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)

_DeleterType = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_ForeignDeleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
_DestructorType = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@dataclass(frozen=True)
class DLInfo:
    """What a DLPack tensor describes, read out of its managed struct."""

    data_ptr: int
    device_type: int
    device_id: int
    code: int
    bits: int
    lanes: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * ((self.bits * self.lanes + 7) // 8)


class _ForeignOwner:
    """Holds a consumed DLManagedTensor and calls its deleter exactly once."""

    def __init__(self, address: int, deleter: int | None) -> None:
        self._address = address
        self._deleter = deleter
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            deleter, self._deleter = self._deleter, None
        if deleter:
            _ForeignDeleter(deleter)(self._address)

    def __del__(self) -> None:
        self.release()


def consume_capsule(capsule: Any) -> tuple[DLInfo, _ForeignOwner]:
    """Take ownership of a "dltensor" capsule: read it, mark it used, return its owner.

    Dropping (or `release()`-ing) the owner runs the producer's deleter.
    """
    try:
        address = _capsule_get_pointer(capsule, _NAME)
    except ValueError as exc:
        raise ValueError(f"not an unused DLPack 'dltensor' capsule ({exc})") from None
    managed = _DLManagedTensor.from_address(address)
    tensor = managed.dl_tensor
    ndim = tensor.ndim
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    strides = tuple(int(tensor.strides[i]) for i in range(ndim)) if tensor.strides else None
    info = DLInfo(
        data_ptr=(tensor.data or 0) + tensor.byte_offset,
        device_type=tensor.device.device_type,
        device_id=tensor.device.device_id,
        code=tensor.dtype.code,
        bits=tensor.dtype.bits,
        lanes=tensor.dtype.lanes,
        shape=shape,
        strides=strides,
    )
    _capsule_set_name(capsule, _USED_NAME)
    return info, _ForeignOwner(address, managed.deleter)


def is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> bool:
    """C order with element strides; size-1 dimensions may carry any stride, and a
    tensor without elements is trivially contiguous."""
    if strides is None or 0 in shape:
        return True
    expected = 1
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def cpu_buffer(info: DLInfo, owner: _ForeignOwner) -> Any:
    """A writable buffer over a CPU DLPack tensor's bytes that keeps `owner` alive."""
    buffer = (ctypes.c_char * info.nbytes).from_address(info.data_ptr)
    weakref.finalize(buffer, owner.release)
    return buffer


class _Export:
    """Everything one exported capsule points into, kept alive until its deleter runs."""

    __slots__ = ("managed", "shape", "strides", "owner")


_exports: dict[int, _Export] = {}
_exports_lock = threading.Lock()


def _drop_export(address: int) -> None:
    try:
        with _exports_lock:
            export = _exports.pop(address, None)
    except Exception:  # interpreter shutdown: module globals may already be gone
        return
    # Released outside the lock: the owner may hold capsules of ours in turn.
    del export


@_DeleterType
def _export_deleter(address: int | None) -> None:
    if address:
        _drop_export(address)


@_DestructorType
def _capsule_destructor(capsule_address: int | None) -> None:
    # An unconsumed capsule still owns its tensor; a consumer renames it first.
    if capsule_address and _capsule_is_valid_raw(capsule_address, _NAME):
        address = _capsule_get_pointer_raw(capsule_address, _NAME)
        if address:
            _drop_export(address)


_DELETER_ADDRESS = ctypes.cast(_export_deleter, ctypes.c_void_p).value
_DESTRUCTOR_ADDRESS = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


def make_capsule(
    *,
    data_ptr: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...] | None,
    code: int,
    bits: int,
    device_type: int,
    device_id: int,
    owner: Any,
) -> Any:
    """A "dltensor" capsule over `data_ptr` that keeps `owner` alive until released."""
    export = _Export()
    ndim = len(shape)
    export.shape = (ctypes.c_int64 * max(ndim, 1))(*shape)
    export.strides = (ctypes.c_int64 * ndim)(*strides) if strides is not None else None
    export.owner = owner
    managed = _DLManagedTensor()
    managed.dl_tensor.data = data_ptr or None
    managed.dl_tensor.device.device_type = device_type
    managed.dl_tensor.device.device_id = device_id
    managed.dl_tensor.ndim = ndim
    managed.dl_tensor.dtype.code = code
    managed.dl_tensor.dtype.bits = bits
    managed.dl_tensor.dtype.lanes = 1
    managed.dl_tensor.shape = ctypes.cast(export.shape, ctypes.POINTER(ctypes.c_int64))
    if export.strides is not None:
        managed.dl_tensor.strides = ctypes.cast(export.strides, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _DELETER_ADDRESS
    export.managed = managed
    address = ctypes.addressof(managed)
    with _exports_lock:
        _exports[address] = export
    return _capsule_new(address, _NAME, _DESTRUCTOR_ADDRESS)


def live_exports() -> int:
    """How many exported capsules still hold their tensors (for leak tests)."""
    with _exports_lock:
        return len(_exports)
