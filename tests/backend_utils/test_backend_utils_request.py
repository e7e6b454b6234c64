"""InferenceRequest: Triton's BLS constructor, incoming requests, cancellation, BLS exec."""

import asyncio
import json
import threading

import numpy as np
import pytest

import backend_utils as pb
from backend_utils._runtime import get_runtime
from backend_utils.testing import FakeRuntime, installed


@pytest.fixture
def runtime():
    with installed(FakeRuntime()) as rt:
        yield rt


def make_bls(**kwargs):
    args = {"inputs": [pb.Tensor("IN", np.zeros(2, np.float32))],
            "requested_output_names": ["OUT"], "model_name": "callee"}
    args.update(kwargs)
    return pb.InferenceRequest(**args)


def incoming(key=1, **kwargs):
    args = dict(inputs=[pb.Tensor("IN", np.ones(2, np.int32))], request_id="r1",
                correlation_id=7, flags=pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
                parameters_json='{"temperature": 0.5}', timeout=100,
                requested_output_names=["OUT"], model_name="me", model_version=1, key=key)
    args.update(kwargs)
    return pb.InferenceRequest._incoming(**args)


def test_bls_constructor_defaults_match_triton():
    request = make_bls()
    assert request.request_id() == ""
    assert request.correlation_id() == 0
    assert request.flags() == 0
    assert request.timeout() == 0
    assert request.parameters() == "{}"
    assert request.model_name() == "callee" and request.model_version() == -1
    assert request.requested_output_names() == {"OUT"}
    assert request.preferred_memory().preferred_memory_type == 2  # default: no preference
    assert request.trace().get_context() is None
    assert request.release_flags() == pb.TRITONSERVER_REQUEST_RELEASE_ALL
    assert [t.name() for t in request.inputs()] == ["IN"]


def test_bls_constructor_accepts_positional_arguments_like_triton():
    tensor = pb.Tensor("IN", np.zeros(1))
    request = pb.InferenceRequest("id", "seq-1", [tensor], ["A", "B"], "m", 3, 2, 50)
    assert request.request_id() == "id"
    assert request.correlation_id() == "seq-1"
    assert request.requested_output_names() == {"A", "B"}
    assert (request.model_version(), request.flags(), request.timeout()) == (3, 2, 50)


def test_bls_constructor_serialises_parameters_to_json():
    request = make_bls(parameters={"a": 1, "b": True, "c": "x"})
    assert json.loads(request.parameters()) == {"a": 1, "b": True, "c": "x"}


def test_bls_constructor_requires_inputs_outputs_and_model():
    with pytest.raises(TypeError, match="model_name"):
        pb.InferenceRequest(inputs=[], requested_output_names=[])
    with pytest.raises(TypeError, match="inputs, requested_output_names, model_name"):
        pb.InferenceRequest()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"correlation_id": 1.5}, "Correlation ID must be integer or string"),
        ({"correlation_id": -1}, "unsigned 64-bit integer"),
        ({"inputs": [None]}, "Input tensor for request with id '' and model name 'callee' should not be empty."),
        ({"requested_output_names": [""]}, "Requested output name for request with id '' and model name 'callee' should not be empty."),
        ({"parameters": {"a": 1.5}}, "Expect parameters values to have type bool/int/str"),
        ({"parameters": {1: "a"}}, "Expect parameters keys to have type str"),
        ({"parameters": [("a", 1)]}, "Expect dict, got <class 'list'>"),
    ],
)
def test_bls_constructor_raises_tritons_errors(kwargs, message):
    with pytest.raises(pb.TritonModelException, match=message.replace("(", r"\(")):
        make_bls(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"request_id": None}, {"model_name": None}, {"inputs": None}, {"inputs": [np.zeros(1)]},
     {"requested_output_names": "OUT"}, {"requested_output_names": [1]}, {"flags": -1},
     {"timeout": -1}, {"model_version": "1"}, {"preferred_memory": 1}, {"trace": "t"}],
)
def test_bls_constructor_rejects_wrong_types(kwargs):
    with pytest.raises(TypeError):
        make_bls(**kwargs)


def test_incoming_request_exposes_what_the_server_sent():
    request = incoming(key="k")
    assert request._key == "k"
    assert request.request_id() == "r1"
    assert request.correlation_id() == 7
    assert request.flags() == pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
    assert json.loads(request.parameters()) == {"temperature": 0.5}
    assert request.timeout() == 100
    assert request.requested_output_names() == {"OUT"}
    assert pb.get_input_tensor_by_name(request, "IN").as_numpy().tolist() == [1, 1]


def test_requested_output_names_is_a_fresh_set():
    request = incoming()
    request.requested_output_names().add("X")
    assert request.requested_output_names() == {"OUT"}


def test_set_flags_validates():
    request = make_bls()
    request.set_flags(pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
    assert request.flags() == 2
    with pytest.raises(TypeError):
        request.set_flags("2")


def test_release_flags_accept_only_all_or_reschedule():
    request = incoming()
    request.set_release_flags(pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert request.release_flags() == 2
    with pytest.raises(pb.TritonModelException, match="Unsupported release flags"):
        request.set_release_flags(4)
    with pytest.raises(TypeError):
        request.set_release_flags(None)


def test_response_sender_is_the_same_object_every_call():
    request = incoming()
    assert request.get_response_sender() is request.get_response_sender()


def test_is_cancelled_asks_until_true_then_caches(runtime):
    request = incoming(key=3)
    assert request.is_cancelled() is False
    assert request.is_cancelled() is False
    assert runtime.cancel_queries == 2
    runtime.cancelled.add(3)
    assert request.is_cancelled() is True
    runtime.cancelled.clear()
    assert request.is_cancelled() is True
    assert request.get_response_sender().is_cancelled() is True
    assert runtime.cancel_queries == 3


def test_bls_requests_are_never_cancelled_and_need_no_runtime():
    assert get_runtime() is None
    assert make_bls().is_cancelled() is False


def test_is_cancelled_without_runtime_says_it_needs_a_running_model():
    with pytest.raises(pb.TritonModelException, match="needs a running model"):
        incoming().is_cancelled()


def test_exec_hands_the_request_to_the_runtime(runtime):
    answer = pb.InferenceResponse([pb.Tensor("OUT", np.ones(1))])
    runtime.bls = lambda request, decoupled: answer
    request = make_bls()
    assert request.exec() is answer
    assert runtime.bls_calls == [(request, False)]


def test_exec_returns_runtime_failures_as_error_responses(runtime):
    response = make_bls(model_name="missing").exec()
    assert response.has_error()
    assert response.error().message() == "Model 'missing' is not ready"
    assert response.error().code() == pb.TritonError.INTERNAL


def test_decoupled_exec_failures_come_back_as_a_one_item_stream(runtime):
    responses = list(make_bls().exec(decoupled=True))
    assert len(responses) == 1 and responses[0].has_error()


def test_exec_validates_decoupled_and_needs_a_runtime():
    with pytest.raises(pb.TritonModelException, match="needs a running model"):
        make_bls().exec()
    with pytest.raises(TypeError):
        make_bls().exec(decoupled="yes")


def test_async_exec_needs_a_running_loop():
    with pytest.raises(RuntimeError):
        make_bls().async_exec()


@pytest.mark.asyncio
async def test_async_exec_runs_exec_off_the_event_loop(runtime):
    loop_thread = threading.get_ident()
    seen = []

    def bls(request, decoupled):
        seen.append(threading.get_ident())
        return pb.InferenceResponse()

    runtime.bls = bls
    future = make_bls().async_exec()
    assert isinstance(future, asyncio.Future)
    response = await future
    assert not response.has_error()
    assert seen and seen[0] != loop_thread


@pytest.mark.asyncio
async def test_async_exec_decoupled_gives_an_async_iterable_stream(runtime):
    def bls(request, decoupled):
        iterator = pb.ResponseIterator()

        def feed():
            iterator._put(pb.InferenceResponse([pb.Tensor("OUT", np.array([1]))]), False)
            iterator._put(None, True)

        threading.Timer(0.01, feed).start()
        return iterator

    runtime.bls = bls
    stream = await make_bls().async_exec(decoupled=True)
    got = [len(r.output_tensors()) async for r in stream]
    assert got == [1, 0]


def test_none_where_tritons_binding_wants_a_value_is_a_type_error():
    """Triton's pybind11 binding refuses None before the call's own checks run."""
    with pytest.raises(TypeError):
        make_bls(correlation_id=None)
    with pytest.raises(TypeError):
        pb.InferenceResponse(output_tensors=None)
    with pytest.raises(TypeError):
        pb.Tensor("", None)  # the data is checked before the name
    with pytest.raises(TypeError):
        pb.Logger.log("message", 1)  # a level is a Logger.LogLevel, not an int
    pb.InferenceResponse(output_tensors=[])
    pb.InferenceResponse()
