"""Tensor: dtypes, zero-copy rules, internal constructors and DLPack."""

import gc

import numpy as np
import pytest

import backend_utils as pb
from backend_utils import _dlpack
from backend_utils.error import TritonModelException

NUMERIC = [
    (np.bool_, 1), (np.uint8, 2), (np.uint16, 3), (np.uint32, 4), (np.uint64, 5),
    (np.int8, 6), (np.int16, 7), (np.int32, 8), (np.int64, 9), (np.float16, 10),
    (np.float32, 11), (np.float64, 12),
]


@pytest.mark.parametrize(("numpy_type", "code"), NUMERIC)
def test_numeric_tensor_keeps_the_array_and_reports_its_type(numpy_type, code):
    array = np.ones((2, 3), dtype=numpy_type)
    tensor = pb.Tensor("x", array)
    assert tensor.as_numpy() is array  # contiguous: not copied
    assert tensor.triton_dtype() == code
    assert tensor.shape() == [2, 3]
    assert tensor.name() == "x"
    assert tensor.is_cpu()


def test_non_contiguous_array_is_made_contiguous():
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    tensor = pb.Tensor("t", base.T)
    assert tensor.as_numpy().flags.c_contiguous
    np.testing.assert_array_equal(tensor.as_numpy(), base.T)
    assert not np.shares_memory(tensor.as_numpy(), base)


@pytest.mark.parametrize(
    "array",
    [np.array([b"a", "b", 3], dtype=np.object_), np.array([b"ab", b"c"], dtype=np.bytes_)],
)
def test_bytes_tensors_accept_object_and_bytes_arrays(array):
    tensor = pb.Tensor("s", array)
    assert tensor.triton_dtype() == 13
    assert tensor._triton_datatype_name() == "BYTES"
    assert tensor.as_numpy() is array
    assert bytes(tensor._raw_bytes()) == pb.serialize_byte_tensor(array)


def test_bytes_tensor_is_serialised_at_construction():
    array = np.array([b"old"], dtype=np.object_)
    tensor = pb.Tensor("s", array)
    array[0] = b"new!"
    assert bytes(tensor._raw_bytes()) == b"\x03\x00\x00\x00old"


@pytest.mark.parametrize(
    "array",
    [np.array(["a"]), np.zeros(2, np.complex64), np.zeros(2, ">f4"),
     np.zeros(2, "datetime64[s]"), np.zeros(2, [("a", "i4")])],
)
def test_unsupported_dtypes_raise(array):
    with pytest.raises(TritonModelException, match="NumPy dtype is not supported."):
        pb.Tensor("x", array)


def test_name_and_data_are_checked():
    with pytest.raises(TritonModelException, match="Tensor name cannot be an empty string."):
        pb.Tensor("", np.zeros(1))
    with pytest.raises(TypeError):
        pb.Tensor(None, np.zeros(1))
    with pytest.raises(TypeError):
        pb.Tensor("x", [1, 2, 3])


def test_from_numpy_view_wraps_without_checks_or_copies():
    array = np.arange(10, dtype=np.float32)[::2]
    tensor = pb.Tensor._from_numpy_view("v", array)
    assert tensor.as_numpy() is array
    bf16 = pb.Tensor._from_numpy_view("b", np.zeros(3, np.uint16), "BF16")
    assert bf16.triton_dtype() == 14


def test_from_triton_views_numeric_buffers_without_copy():
    buffer = bytearray(np.arange(8, dtype="<i4").tobytes() + b"\xff" * 4)
    tensor = pb.Tensor._from_triton("in", "INT32", [2, 4], memoryview(buffer))
    np.testing.assert_array_equal(tensor.as_numpy(), np.arange(8).reshape(2, 4))
    buffer[0] = 9  # a view: the change shows through
    assert tensor.as_numpy()[0, 0] == 9
    assert tensor._triton_datatype_name() == "INT32"


def test_from_triton_parses_bytes_into_object_array():
    raw = pb.serialize_byte_tensor(np.array([b"a", b"bc", b"", b"d"], dtype=np.object_))
    tensor = pb.Tensor._from_triton("s", "BYTES", (2, 2), raw)
    out = tensor.as_numpy()
    assert out.dtype == np.object_ and out.shape == (2, 2)
    assert out.tolist() == [[b"a", b"bc"], [b"", b"d"]]


def test_from_triton_rejects_short_buffers():
    with pytest.raises(TritonModelException, match="needs 16 bytes"):
        pb.Tensor._from_triton("f", "FP32", [4], b"\x00" * 8)
    with pytest.raises(TritonModelException, match="incomplete length field"):
        pb.Tensor._from_triton("s", "BYTES", [2], b"\x01\x00\x00\x00a")


def test_from_triton_bf16_cannot_become_numpy():
    tensor = pb.Tensor._from_triton("b", "BF16", [2], b"\x80\x3f\x00\x40")
    assert tensor.triton_dtype() == 14 and tensor.shape() == [2]
    with pytest.raises(TritonModelException, match="BF16 and cannot be converted to NumPy"):
        tensor.as_numpy()


def test_raw_bytes_are_the_c_order_little_endian_payload():
    tensor = pb.Tensor("x", np.array([[1, 2], [3, 4]], dtype=np.int16))
    assert bytes(tensor._raw_bytes()) == np.array([1, 2, 3, 4], "<i2").tobytes()
    scalar = pb.Tensor("s", np.array(7, dtype=np.float64))
    assert scalar.shape() == [] and len(scalar._raw_bytes()) == 8


# -- DLPack ----------------------------------------------------------------------------


def test_to_dlpack_shares_memory_with_numpy_consumers():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb.Tensor("x", array)
    out = np.from_dlpack(tensor)
    assert out.shape == (2, 3) and np.shares_memory(out, array)
    assert tensor.__dlpack_device__() == (1, 0)


def test_exported_capsules_release_their_tensor():
    tensor = pb.Tensor("x", np.zeros(4, np.int64))
    before = _dlpack.live_exports()
    capsule = tensor.to_dlpack()
    assert _dlpack.live_exports() == before + 1
    del capsule  # never consumed: the capsule's destructor frees it
    gc.collect()
    assert _dlpack.live_exports() == before
    consumed = np.from_dlpack(tensor)
    del consumed
    gc.collect()
    assert _dlpack.live_exports() == before


def test_read_only_arrays_can_still_be_exported():
    array = np.arange(3)
    array.flags.writeable = False
    np.testing.assert_array_equal(np.from_dlpack(pb.Tensor("r", array)), [0, 1, 2])


@pytest.mark.parametrize(("numpy_type", "code"), NUMERIC)
def test_from_dlpack_imports_every_numeric_type_zero_copy(numpy_type, code):
    array = np.ones((3, 2), dtype=numpy_type)
    tensor = pb.Tensor.from_dlpack("d", array)
    assert tensor.triton_dtype() == code
    assert np.shares_memory(tensor.as_numpy(), array)


def test_from_dlpack_accepts_a_bare_capsule():
    array = np.arange(4, dtype=np.int32)
    tensor = pb.Tensor.from_dlpack("c", array.__dlpack__())
    tensor.as_numpy()[0] = 40
    assert array[0] == 40


def test_from_dlpack_round_trips_bf16():
    bf16 = pb.Tensor._from_triton("b", "BF16", [2], bytearray(b"\x80\x3f\x00\x40"))
    again = pb.Tensor.from_dlpack("b2", bf16)
    assert again.triton_dtype() == 14 and again.shape() == [2]
    assert bytes(again._raw_bytes()) == b"\x80\x3f\x00\x40"


def test_from_dlpack_rejects_non_contiguous_with_tritons_message():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(TritonModelException) as info:
        pb.Tensor.from_dlpack("t", array.T)
    assert str(info.value) == (
        "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are "
        "stored in C-Order are supported."
    )
    with pytest.raises(TritonModelException, match="not contiguous"):
        pb.Tensor.from_dlpack("t", np.arange(10)[::2])


def test_from_dlpack_rejects_bad_inputs():
    with pytest.raises(TritonModelException, match="Tensor must be a DLPack capsule"):
        pb.Tensor.from_dlpack("x", [1, 2])
    with pytest.raises(TritonModelException, match="Tensor name cannot be an empty"):
        pb.Tensor.from_dlpack("", np.zeros(1))

    class OnDevice:
        def __dlpack__(self, stream=None):
            raise AssertionError("not called")

        def __dlpack_device__(self):
            return (14, 0)

    with pytest.raises(TritonModelException, match="DLDevice type 14 is not support"):
        pb.Tensor.from_dlpack("x", OnDevice())
    capsule = np.zeros(2).__dlpack__()
    pb.Tensor.from_dlpack("x", capsule)
    with pytest.raises(TritonModelException, match="not supported"):
        pb.Tensor.from_dlpack("y", capsule)  # already consumed


def test_bytes_tensors_cannot_go_through_dlpack():
    tensor = pb.Tensor("s", np.array([b"a"], dtype=np.object_))
    with pytest.raises(TritonModelException, match="DLPack does not have support for string"):
        tensor.to_dlpack()
    with pytest.raises(TritonModelException, match="string"):
        tensor.__dlpack__()


def test_foreign_memory_is_released_when_the_tensor_dies():
    released = []
    array = np.arange(4, dtype=np.float64)

    class Producer:
        def __dlpack__(self, stream=None):
            return array.__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    tensor = pb.Tensor.from_dlpack("p", Producer())
    view = tensor.as_numpy()
    import weakref

    weakref.finalize(view.base, released.append, True)
    del tensor, view
    gc.collect()
    assert released == [True]


def test_cuda_dlpack_tensors_stay_on_device_without_a_numpy_view():
    """A CUDA capsule is described, kept and re-exported, never dereferenced."""
    host = np.arange(6, dtype=np.float32)
    capsule = _dlpack.make_capsule(
        data_ptr=host.ctypes.data, shape=(2, 3), strides=None, code=_dlpack.CODE_FLOAT,
        bits=32, device_type=_dlpack.DEVICE_CUDA, device_id=1, owner=host,
    )
    tensor = pb.Tensor.from_dlpack("g", capsule)
    assert not tensor.is_cpu()
    assert tensor.shape() == [2, 3] and tensor.triton_dtype() == 11
    assert tensor.__dlpack_device__() == (2, 1)
    assert tensor._gpu_data_ptr() == host.ctypes.data
    with pytest.raises(TritonModelException, match="Tensor is stored in GPU"):
        tensor.as_numpy()
    again = pb.Tensor.from_dlpack("g2", tensor)
    assert again._device() == (2, 1)
