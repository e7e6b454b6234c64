"""pb_utils module surface, config/tensor lookup helpers and model control."""

import numpy as np
import pytest

import backend_utils as pb
from backend_utils._runtime import Runtime, get_runtime, set_runtime
from backend_utils.testing import FakeRuntime, installed

PUBLIC = [
    "Tensor", "InferenceRequest", "InferenceResponse", "InferenceResponseSender",
    "ResponseIterator", "TritonError", "TritonModelException", "Logger", "PreferredMemory",
    "InferenceTrace", "MemoryType", "MetricFamily", "Metric", "MetricKind", "ModelConfig",
    "load_model", "unload_model", "is_model_ready", "get_input_tensor_by_name",
    "get_output_tensor_by_name", "get_input_config_by_name", "get_output_config_by_name",
    "using_decoupled_model_transaction_policy", "triton_string_to_numpy",
    "TRITON_STRING_TO_NUMPY", "triton_to_numpy_type", "numpy_to_triton_type",
    "serialize_byte_tensor", "deserialize_bytes_tensor",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START", "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL", "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE", "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_MEMORY_CPU",
]


@pytest.mark.parametrize("module_name", ["triton_python_backend_utils", "c_python_backend_utils"])
def test_triton_module_names_expose_the_same_objects(module_name):
    module = __import__(module_name)
    for name in PUBLIC:
        assert getattr(module, name) is getattr(pb, name), name
    assert sorted(pb.__all__) == sorted(PUBLIC)


def test_runtime_slot_installs_and_restores():
    assert get_runtime() is None
    fake = FakeRuntime()
    assert isinstance(fake, Runtime)
    with installed(fake):
        assert get_runtime() is fake
    assert get_runtime() is None
    set_runtime(fake)
    set_runtime(None)
    assert get_runtime() is None


def test_input_and_output_config_lookup():
    cfg = {"input": [{"name": "A"}, {"name": "B"}], "output": [{"name": "O"}]}
    assert pb.get_input_config_by_name(cfg, "B") == {"name": "B"}
    assert pb.get_input_config_by_name(cfg, "Z") is None
    assert pb.get_output_config_by_name(cfg, "O") == {"name": "O"}
    assert pb.get_output_config_by_name({}, "O") is None
    assert pb.get_input_config_by_name({}, "A") is None


def test_decoupled_policy_lookup():
    assert pb.using_decoupled_model_transaction_policy({}) is False
    assert pb.using_decoupled_model_transaction_policy(
        {"model_transaction_policy": {"decoupled": True}}) is True


def test_input_tensor_lookup_returns_first_match_or_none():
    first, second = pb.Tensor("A", np.zeros(1)), pb.Tensor("A", np.ones(1))
    request = pb.InferenceRequest(inputs=[first, second], requested_output_names=[], model_name="m")
    assert pb.get_input_tensor_by_name(request, "A") is first
    assert pb.get_input_tensor_by_name(request, "B") is None


# -- model control -------------------------------------------------------------------


def test_load_unload_and_readiness_go_through_the_runtime():
    with installed(FakeRuntime()) as rt:
        pb.load_model("m", config='{"backend": "python"}', files={"file:1/model.py": b"x"})
        assert rt.loaded["m"] == ('{"backend": "python"}', {"file:1/model.py": b"x"})
        assert pb.is_model_ready("m") is True
        assert pb.is_model_ready("m", "3") is False
        pb.unload_model("m", unload_dependents=True)
        assert rt.unloaded == [("m", True)]
        assert pb.is_model_ready("m") is False


def test_model_control_failures_are_wrapped_like_triton():
    with installed(FakeRuntime()) as rt:
        rt.model_control_error = "explicit model load / unload is not allowed"
        with pytest.raises(pb.TritonModelException, match="^Failed to load model: explicit"):
            pb.load_model("m")
        with pytest.raises(pb.TritonModelException, match="^Failed to unload model: "):
            pb.unload_model("m")
        with pytest.raises(pb.TritonModelException, match="^Failed to check model readiness: "):
            pb.is_model_ready("m")


def test_model_control_validates_arguments():
    with installed(FakeRuntime()):
        with pytest.raises(pb.TritonModelException, match="files should be a dictionary"):
            pb.load_model("m", files=[("a", b"b")])
        with pytest.raises(TypeError):
            pb.load_model("m", files={"file:a": 3})
        with pytest.raises(TypeError):
            pb.load_model(None)
        with pytest.raises(TypeError):
            pb.unload_model("m", unload_dependents="yes")
        with pytest.raises(pb.TritonModelException, match="version should be an integral value"):
            pb.is_model_ready("m", "abc")
        with pytest.raises(pb.TritonModelException, match="version should be an integral value"):
            pb.is_model_ready("m", "-2")
        with pytest.raises(TypeError):
            pb.is_model_ready("m", 1)


def test_model_control_needs_a_running_model():
    for call in (lambda: pb.load_model("m"), lambda: pb.unload_model("m"),
                 lambda: pb.is_model_ready("m")):
        with pytest.raises(pb.TritonModelException, match="needs a running model"):
            call()
