"""TritonError, TritonModelException and the TRITONSERVER_* constants."""

import pytest

import backend_utils as pb


def test_error_codes_use_tritonserver_numbering():
    expected = {"UNKNOWN": 0, "INTERNAL": 1, "NOT_FOUND": 2, "INVALID_ARG": 3,
                "UNAVAILABLE": 4, "UNSUPPORTED": 5, "ALREADY_EXISTS": 6, "CANCELLED": 7}
    for name, value in expected.items():
        assert getattr(pb.TritonError, name) == value


def test_error_defaults_to_internal_and_exposes_code_and_message():
    error = pb.TritonError("boom")
    assert error.code() == pb.TritonError.INTERNAL
    assert error.message() == "boom"
    assert str(error) == "boom"
    assert pb.TritonError("gone", pb.TritonError.CANCELLED).code() == 7
    assert pb.TritonError("x", 2).code() == pb.TritonError.NOT_FOUND


@pytest.mark.parametrize("bad", [None, 3.0, 42, -1, True])
def test_error_rejects_unknown_codes(bad):
    with pytest.raises(TypeError):
        pb.TritonError("x", bad)


def test_error_requires_a_message():
    with pytest.raises(TypeError):
        pb.TritonError(None)


def test_model_exception_is_an_exception_with_message():
    exc = pb.TritonModelException("bad")
    assert isinstance(exc, Exception)
    assert str(exc) == "bad" and exc.message() == "bad"


def test_constants_have_tritons_values():
    assert pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2
    assert pb.TRITONSERVER_MEMORY_GPU == 0
    assert pb.TRITONSERVER_MEMORY_CPU == 1
    assert pb.MemoryType.TRITONSERVER_MEMORY_CPU is pb.TRITONSERVER_MEMORY_CPU


def test_preferred_memory_validates_and_exposes_fields():
    memory = pb.PreferredMemory(pb.TRITONSERVER_MEMORY_GPU, 1)
    assert (memory.preferred_memory_type, memory.preferred_device_id) == (0, 1)
    assert pb.PreferredMemory(pb.TRITONSERVER_MEMORY_CPU).preferred_device_id == 0
    with pytest.raises(TypeError):
        pb.PreferredMemory(7)
    with pytest.raises(TypeError):
        pb.PreferredMemory(None)
    with pytest.raises(TypeError):
        pb.PreferredMemory(pb.TRITONSERVER_MEMORY_CPU, "0")


def test_inference_trace_context_is_none_unless_traced():
    assert pb.InferenceTrace().get_context() is None
    traced = pb.InferenceTrace._incoming('{"traceparent": "00-ab"}', key=5)
    assert traced.get_context() == '{"traceparent": "00-ab"}'
    assert traced._key == 5
