"""InferenceResponse and InferenceResponseSender (Triton's sending rules)."""

import json
import threading

import numpy as np
import pytest

import backend_utils as pb
from backend_utils.testing import FakeRuntime, installed

FINAL = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def incoming(key=1):
    return pb.InferenceRequest._incoming(
        inputs=[], request_id="", correlation_id=0, flags=0, parameters_json="{}",
        timeout=0, requested_output_names=["OUT"], model_name="m", model_version=1, key=key)


def response():
    return pb.InferenceResponse([pb.Tensor("OUT", np.ones(1, np.float32))])


# -- InferenceResponse ---------------------------------------------------------------


def test_response_defaults_to_no_outputs_and_no_error():
    empty = pb.InferenceResponse()
    assert empty.output_tensors() == [] and not empty.has_error() and empty.error() is None
    assert empty.parameters() == "{}"


def test_response_carries_outputs_error_and_parameters():
    error = pb.TritonError("bad input", pb.TritonError.INVALID_ARG)
    r = pb.InferenceResponse(output_tensors=[], error=error, parameters={"n": 3, "ok": False})
    assert r.has_error() and r.error() is error
    assert json.loads(r.parameters()) == {"n": 3, "ok": False}
    out = response()
    assert pb.get_output_tensor_by_name(out, "OUT") is out.output_tensors()[0]
    assert pb.get_output_tensor_by_name(out, "NOPE") is None


def test_response_validates_its_arguments():
    with pytest.raises(pb.TritonModelException, match="Output tensor for inference response should not be empty."):
        pb.InferenceResponse([None])
    with pytest.raises(TypeError):
        pb.InferenceResponse(np.ones(1))
    with pytest.raises(TypeError):
        pb.InferenceResponse([np.ones(1)])
    with pytest.raises(TypeError):
        pb.InferenceResponse(error="bad")
    with pytest.raises(pb.TritonModelException, match="bool/int/str"):
        pb.InferenceResponse(parameters={"x": 1.5})


def test_incoming_response_keeps_server_parameters_verbatim():
    r = pb.InferenceResponse._incoming(output_tensors=[], parameters_json='{"p": 0.25}')
    assert json.loads(r.parameters()) == {"p": 0.25}


# -- InferenceResponseSender ---------------------------------------------------------


@pytest.fixture
def decoupled():
    with installed(FakeRuntime(decoupled=True)) as rt:
        yield rt


@pytest.fixture
def default_mode():
    with installed(FakeRuntime(decoupled=False)) as rt:
        yield rt


def test_decoupled_sender_sends_many_then_final(decoupled):
    request = incoming()
    sender = request.get_response_sender()
    first, second = response(), response()
    sender.send(first)
    sender.send(second)
    sender.send(flags=FINAL)
    assert decoupled.sent == [(request, first, 0), (request, second, 0), (request, None, FINAL)]
    assert sender._is_closed() and sender._sends() == 3


def test_sender_refuses_anything_after_final(decoupled):
    sender = incoming().get_response_sender()
    sender.send(response(), FINAL)
    with pytest.raises(pb.TritonModelException, match="Response sender has been closed."):
        sender.send(response())
    with pytest.raises(pb.TritonModelException, match="Response sender has been closed."):
        sender.send(flags=FINAL)


def test_sender_validates_flags_and_response(decoupled):
    sender = incoming().get_response_sender()
    with pytest.raises(pb.TritonModelException, match="Unsupported flag provided."):
        sender.send(response(), flags=2)
    with pytest.raises(pb.TritonModelException, match="Inference Response object must be provided"):
        sender.send()
    with pytest.raises(TypeError):
        sender.send("not a response")
    with pytest.raises(TypeError):
        sender.send(response(), flags=None)
    assert decoupled.sent == []


def test_default_mode_allows_exactly_one_response(default_mode):
    sender = incoming().get_response_sender()
    with pytest.raises(pb.TritonModelException, match="cannot send complete final before sending a response"):
        sender.send(flags=FINAL)
    sender.send(response())
    with pytest.raises(pb.TritonModelException, match="cannot send more than one response"):
        sender.send(response())
    sender.send(flags=FINAL)
    assert [flags for _, _, flags in default_mode.sent] == [0, FINAL]


def test_default_mode_response_with_final_closes(default_mode):
    sender = incoming().get_response_sender()
    sender.send(response(), FINAL)
    with pytest.raises(pb.TritonModelException, match="more than one response"):
        sender.send(response(), FINAL)


def test_sender_of_a_bls_request_has_no_decoupled_state(decoupled):
    request = pb.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
    with pytest.raises(pb.TritonModelException, match="no reference to the decoupled state"):
        request.get_response_sender().send(response())


def test_sender_without_runtime_needs_a_running_model():
    with pytest.raises(pb.TritonModelException, match="needs a running model"):
        incoming().get_response_sender().send(response())


def test_delivery_failure_propagates_and_final_still_closes(decoupled):
    sender = incoming().get_response_sender()
    decoupled.send_error = "response factory deleted"
    with pytest.raises(pb.TritonModelException, match="response factory deleted"):
        sender.send(response(), FINAL)
    decoupled.send_error = None
    with pytest.raises(pb.TritonModelException, match="closed"):
        sender.send(response())


def test_stub_can_close_a_sender(decoupled):
    sender = incoming().get_response_sender()
    sender._close()
    with pytest.raises(pb.TritonModelException, match="closed"):
        sender.send(response())


def test_sends_from_many_threads_are_all_delivered_once(decoupled):
    sender = incoming().get_response_sender()
    threads = [threading.Thread(target=sender.send, args=(response(),)) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sender.send(flags=FINAL)
    assert len(decoupled.sent) == 17 and decoupled.sent[-1][2] == FINAL
