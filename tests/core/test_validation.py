"""Requests checked against model configs with Triton's messages (core infer_request.cc)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from pbserve.core.config.model_config import (
    complete_defaults,
    parse_model_config,
    read_model_config,
)
from pbserve.core.types import InferRequest, TensorData
from pbserve.core.validation import (
    PASSED_MAX,
    RequestValidator,
    batch_size,
    validate_request,
)
from pbserve.errors import ErrorCode, ServerError

CONFORMANCE_MODELS = Path("/work/shared/conformance/models")
NOTE = ("NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
        "to be prepended to each input shape. If you want to specify the full shape including "
        "the batch dim in your input dims config, try setting max_batch_size to zero. See the "
        "model configuration docs for more info on max_batch_size.")

ADD_SUB = complete_defaults(parse_model_config("""
name: "add_sub" backend: "python" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""), "add_sub")

BATCHED = complete_defaults(parse_model_config("""
name: "batched" backend: "python" max_batch_size: 4
input [ { name: "A" data_type: TYPE_INT32 dims: [ 2 ] },
        { name: "B" data_type: TYPE_INT32 dims: [ -1 ] optional: true },
        { name: "R" data_type: TYPE_INT32 dims: [ 2, -1 ] reshape { shape: [ 1, 2, -1 ] }
          optional: true } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
"""), "batched")

TEXT = complete_defaults(parse_model_config("""
name: "text" backend: "python" max_batch_size: 0
input [ { name: "T" data_type: TYPE_STRING dims: [ -1 ] } ]
"""), "text")


def tensor(name: str, array: np.ndarray, datatype: str | None = None) -> TensorData:
    if array.dtype == np.object_:
        data = b"".join(struct.pack("<I", len(x)) + x for x in array.reshape(-1))
        return TensorData(name, datatype or "BYTES", tuple(array.shape), data)
    names = {np.float32: "FP32", np.float64: "FP64", np.int32: "INT32", np.int64: "INT64"}
    datatype = datatype or names[array.dtype.type]
    return TensorData(name, datatype, tuple(array.shape), array.tobytes())


def add_sub_request(*tensors: TensorData, **kwargs) -> InferRequest:
    return InferRequest("add_sub", inputs=list(tensors), **kwargs)


FOUR = np.arange(4, dtype=np.float32)
GOOD = (tensor("INPUT0", FOUR), tensor("INPUT1", FOUR))


def error_of(validator: RequestValidator, request: InferRequest) -> ServerError:
    with pytest.raises(ServerError) as info:
        validator.validate(request)
    assert info.value.code == ErrorCode.INVALID_ARG
    return info.value


# -- good requests ---------------------------------------------------------------

def test_a_good_request_passes_and_reports_no_batch() -> None:
    assert RequestValidator(ADD_SUB).validate(add_sub_request(*GOOD)) == 0
    validate_request(ADD_SUB, add_sub_request(*GOOD, requested_outputs=["OUTPUT1"]))


def test_wildcard_dims_take_any_size_and_optional_inputs_may_be_absent() -> None:
    v = RequestValidator(BATCHED)
    a = tensor("A", np.zeros((3, 2), np.int32))
    assert v.validate(InferRequest("batched", inputs=[a])) == 3
    b = tensor("B", np.zeros((3, 7), np.int32))
    assert v.validate(InferRequest("batched", inputs=[a, b])) == 3


def test_reshaped_input_is_checked_on_its_reshaped_size() -> None:
    v = RequestValidator(BATCHED)
    a = tensor("A", np.zeros((1, 2), np.int32))
    r = tensor("R", np.zeros((1, 2, 5), np.int32))
    assert v.validate(InferRequest("batched", inputs=[a, r])) == 1
    assert v.reshaped_inputs == {"R"}
    assert v.model_shape(r, 1) == (1, 1, 2, 5) and v.model_shape(a, 1) == (1, 2)
    short = TensorData("R", "INT32", (1, 2, 5), b"\0" * 36)
    assert "Expected 40, got 36" in error_of(v, InferRequest("batched", inputs=[a, short])).message


@pytest.mark.skipif(not CONFORMANCE_MODELS.is_dir(), reason="conformance models not present")
def test_conformance_dtypes_model_accepts_every_datatype() -> None:
    cfg = complete_defaults(read_model_config(CONFORMANCE_MODELS / "identity_dtypes"),
                            "identity_dtypes")
    sizes = {"BOOL": 1, "INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8, "UINT8": 1, "UINT16": 2,
             "UINT32": 4, "UINT64": 8, "FP16": 2, "FP32": 4, "FP64": 8}
    inputs = [TensorData(f"IN_{k}", k, (3,), b"\1" * (3 * n)) for k, n in sizes.items()]
    inputs.append(tensor("IN_BYTES", np.array([b"", b"abc", b"\xff"], dtype=np.object_)))
    RequestValidator(cfg).validate(InferRequest("identity_dtypes", inputs=inputs))


def test_memoryview_data_is_measured_in_bytes() -> None:
    view = memoryview(FOUR)  # format "f": len() would say 4
    req = add_sub_request(TensorData("INPUT0", "FP32", (4,), view), GOOD[1])
    RequestValidator(ADD_SUB).validate(req)


# -- bad requests, in Triton's words ---------------------------------------------

def test_wrong_datatype_names_the_input_and_both_types() -> None:
    req = add_sub_request(tensor("INPUT0", FOUR.astype(np.float64)), GOOD[1], id="r1")
    assert error_of(RequestValidator(ADD_SUB), req).message == (
        "[request id: r1] inference input 'INPUT0' data-type is 'FP64', but model 'add_sub' "
        "expects 'FP32'")
    req = add_sub_request(TensorData("INPUT0", "FP8", (4,), b"1234"), GOOD[1])
    assert "data-type is '<invalid>'" in error_of(RequestValidator(ADD_SUB), req).message


def test_wrong_shape_without_batching_has_no_note() -> None:
    req = add_sub_request(tensor("INPUT0", FOUR[:3]), GOOD[1])
    assert error_of(RequestValidator(ADD_SUB), req).message == (
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'add_sub'. "
        "Expected [4], got [3]. ")


def test_wrong_shape_with_batching_shows_the_batch_dim_and_the_note() -> None:
    req = InferRequest("batched", id="7", inputs=[tensor("A", np.zeros(2, np.int32))])
    assert error_of(RequestValidator(BATCHED), req).message == (
        "[request id: 7] unexpected shape for input 'A' for model 'batched'. Expected [-1,2], "
        "got [2]. " + NOTE)


def test_a_variable_dim_in_the_request_is_refused() -> None:
    cfg = complete_defaults(parse_model_config(
        'backend: "python" input [ { name: "X" data_type: TYPE_INT32 dims: [ -1 ] } ]'), "m")
    req = InferRequest("m", inputs=[TensorData("X", "INT32", (-1,), b"")])
    assert error_of(RequestValidator(cfg), req).message == (
        "[request id: <id_unknown>] All input dimensions should be specified for input 'X' for "
        "model 'm', got [-1]")


def test_missing_input_lists_what_was_sent_and_what_is_missing() -> None:
    req = add_sub_request(GOOD[0])
    assert error_of(RequestValidator(ADD_SUB), req).message == (
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'add_sub'. "
        "Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all "
        "required input(s).")
    assert "Got input(s) [], but missing required input(s) ['INPUT0','INPUT1']" in \
        error_of(RequestValidator(ADD_SUB), add_sub_request()).message


def test_missing_required_input_with_optionals_uses_the_range_message() -> None:
    b = tensor("B", np.zeros((1, 2), np.int32))
    assert error_of(RequestValidator(BATCHED), InferRequest("batched", inputs=[b])).message == (
        "[request id: <id_unknown>] expected number of inputs between 1 and 3 but got 1 inputs "
        "for model 'batched'. Got input(s) ['B'], but missing required input(s) ['A']. Please "
        "provide all required input(s).")


def test_too_many_inputs_keeps_tritons_odd_empty_missing_list() -> None:
    extra = tensor("INPUT2", FOUR)
    assert "but missing required input(s) ]. Please" in \
        error_of(RequestValidator(ADD_SUB), add_sub_request(*GOOD, extra)).message


def test_unknown_input_in_place_of_a_known_one() -> None:
    req = add_sub_request(GOOD[0], tensor("INPUTX", FOUR))
    assert error_of(RequestValidator(ADD_SUB), req).message == \
        "unexpected inference input 'INPUTX' for model 'add_sub'"


def test_unknown_requested_output() -> None:
    req = add_sub_request(*GOOD, requested_outputs=["OUTPUT9", "OUTPUT0"])
    assert error_of(RequestValidator(ADD_SUB), req).message == \
        "unexpected inference output 'OUTPUT9' for model 'add_sub'"


def test_repeated_input_or_output_names() -> None:
    v = RequestValidator(ADD_SUB)
    assert error_of(v, add_sub_request(GOOD[0], GOOD[0], id="d")).message == \
        "[request id: d] input 'INPUT0' already exists in request"
    assert error_of(v, add_sub_request(*GOOD, requested_outputs=["OUTPUT0", "OUTPUT0"])).message \
        == "[request id: <id_unknown>] output 'OUTPUT0' already exists in request"


def test_batch_over_max_batch_size() -> None:
    req = InferRequest("batched", inputs=[tensor("A", np.zeros((5, 2), np.int32))])
    assert error_of(RequestValidator(BATCHED), req).message == \
        "[request id: <id_unknown>] inference request batch-size must be <= 4 for 'batched'"


def test_inputs_must_agree_on_the_batch_size() -> None:
    req = InferRequest("batched", inputs=[tensor("A", np.zeros((2, 2), np.int32)),
                                          tensor("B", np.zeros((3, 1), np.int32))])
    assert error_of(RequestValidator(BATCHED), req).message == \
        "[request id: <id_unknown>] input 'B' batch size does not match other inputs for 'batched'"


def test_batching_model_needs_a_shape() -> None:
    req = InferRequest("batched", inputs=[TensorData("A", "INT32", (), b"")])
    assert error_of(RequestValidator(BATCHED), req).message == \
        ("[request id: <id_unknown>] input 'A' has no shape but model requires batch dimension "
         "for 'batched'")


def test_byte_size_must_match_shape_times_element_size() -> None:
    req = add_sub_request(TensorData("INPUT0", "FP32", (4,), b"\0" * 12), GOOD[1])
    assert error_of(RequestValidator(ADD_SUB), req).message == (
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
        "'add_sub'. Expected 16, got 12")


def text_request(shape: tuple[int, ...], data: bytes) -> InferRequest:
    return InferRequest("text", inputs=[TensorData("T", "BYTES", shape, data)])


def item(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def test_bytes_element_count_must_match_the_shape() -> None:
    v = RequestValidator(TEXT)
    v.validate(text_request((2,), item(b"ab") + item(b"")))
    v.validate(text_request((0,), b""))
    assert error_of(v, text_request((3,), item(b"ab") + item(b""))).message == (
        "[request id: <id_unknown>] expected 3 string elements for inference input 'T' for "
        "model 'text', got 2")
    assert error_of(v, text_request((1,), item(b"ab") + item(b"c"))).message == (
        "[request id: <id_unknown>] unexpected number of string elements 2 for inference input "
        "'T' for model 'text', expecting 1")


def test_bytes_truncated_length_prefix_or_item_is_refused() -> None:
    v = RequestValidator(TEXT)
    assert error_of(v, text_request((2,), item(b"ab") + b"\1\0")).message == (
        "[request id: <id_unknown>] incomplete string length indicator for inference input 'T' "
        "for model 'text', expecting 4 bytes but only 2 bytes available. Please make sure the "
        "string length indicator is in one buffer.")
    assert "declares 10 bytes but only 3 bytes are left" in \
        error_of(v, text_request((1,), struct.pack("<I", 10) + b"abc")).message
    # a cut prefix after the elements the shape holds is told as Triton tells it
    assert "expecting 4 bytes but only 3 bytes available" in \
        error_of(v, text_request((1,), item(b"ab") + b"\1\0\0")).message


def test_string_correlation_id_for_an_integer_corrid_control() -> None:
    cfg = complete_defaults(parse_model_config("""backend: "python" max_batch_size: 2
        input [ { name: "V" data_type: TYPE_INT32 dims: [ 1 ] } ]
        sequence_batching { control_input [ { name: "CORRID" control [
            { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] } ] }"""), "seq")
    v = RequestValidator(cfg)
    value = tensor("V", np.zeros((1, 1), np.int32))
    v.validate(InferRequest("seq", inputs=[value], correlation_id=5))
    # a request like the one that passed: its inputs are not checked again, its id is
    req = InferRequest("seq", id="s", inputs=[value], correlation_id="abc")
    assert error_of(v, req).message == ("[request id: s] sequence batching control 'CORRID' "
                                        "data-type is 'BYTES', but model 'seq' expects 'UINT64'")


# -- batch size and speed ---------------------------------------------------------

def test_batch_size_is_the_first_inputs_leading_dim() -> None:
    a = tensor("A", np.zeros((3, 2), np.int32))
    assert batch_size(BATCHED, InferRequest("batched", inputs=[a])) == 3
    assert RequestValidator(BATCHED).batch_size(InferRequest("batched", inputs=[a])) == 3
    assert batch_size(ADD_SUB, add_sub_request(*GOOD)) == 0


def test_a_request_like_one_that_passed_passes_and_other_ones_are_still_checked() -> None:
    v = RequestValidator(BATCHED)
    a = tensor("A", np.zeros((3, 2), np.int32))
    assert v.validate(InferRequest("batched", inputs=[a])) == 3
    assert v.validate(InferRequest("batched", inputs=[a])) == 3  # remembered
    short = TensorData("A", "INT32", (3, 2), bytes(20))  # same shape, fewer bytes
    assert "Expected 24, got 20" in error_of(v, InferRequest("batched", inputs=[short])).message
    wide = tensor("A", np.zeros((3, 3), np.int32))
    assert "unexpected shape for input 'A'" in \
        error_of(v, InferRequest("batched", inputs=[wide])).message
    asked = InferRequest("batched", inputs=[a], requested_outputs=["NOPE"])
    assert error_of(v, asked).message == \
        "unexpected inference output 'NOPE' for model 'batched'"
    listed = InferRequest("batched", inputs=[TensorData("A", "INT32", [3, 2], bytes(24))])
    assert v.validate(listed) == 3  # a shape given as a list: checked in full


def test_a_bytes_input_is_checked_every_time() -> None:
    v = RequestValidator(TEXT)
    good = item(b"ab") + item(b"")
    v.validate(text_request((2,), good))
    v.validate(text_request((2,), good))
    bad = struct.pack("<I", 5) + b"abcde" + b"\0"  # the same shape and size: 1 item
    assert len(bad) == len(good)
    assert "incomplete string length indicator" in \
        error_of(v, text_request((2,), bad)).message


def test_the_requests_remembered_are_bounded() -> None:
    v = RequestValidator(BATCHED)
    for n in range(1, 2 * PASSED_MAX):
        b = TensorData("B", "INT32", (1, n), bytes(4 * n))
        a = tensor("A", np.zeros((1, 2), np.int32))
        assert v.validate(InferRequest("batched", inputs=[a, b])) == 1
        assert len(v._passed) <= PASSED_MAX
