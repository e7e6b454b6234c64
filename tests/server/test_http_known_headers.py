"""Infer request headers remembered (http/known_headers.py): a header seen before decodes
to what the full decode gives, and any header it does not fit decodes the full way."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pbserve.errors import ServerError
from pbserve.server.http import codec
from pbserve.server.http.known_headers import KEPT_MAX, KnownHeaders


def binary_input(name: str, data: bytes, shape: list[int], datatype: str = "FP32") -> dict:
    return {"name": name, "datatype": datatype, "shape": shape,
            "parameters": {"binary_data_size": len(data)}}


def body(header: dict, *binaries: bytes) -> tuple[bytes, memoryview]:
    return json.dumps(header).encode(), memoryview(b"".join(binaries))


def fields(request, plan) -> tuple:
    return (request.model_name, request.model_version, request.id,
            [(t.name, t.datatype, t.shape, bytes(t.data), t.shm) for t in request.inputs],
            request.requested_outputs, request.parameters, request.correlation_id,
            request.flags, request.priority, request.timeout_us, request.output_shm,
            request.uses_shm, plan.binary, plan.default_binary)


A = np.arange(4, dtype=np.float32).tobytes()
B = np.arange(6, dtype=np.int32).tobytes()
PLAIN = {"inputs": [binary_input("A", A, [1, 4]), binary_input("B", B, [2, 3], "INT32")],
         "outputs": [{"name": "OUT", "parameters": {"binary_data": True}},
                     {"name": "JSON"}]}


def test_a_header_seen_before_decodes_as_the_full_decode_does():
    known = KnownHeaders()
    header, binary = body(PLAIN, A, B)
    first = known.decode("m", "2", header, binary)
    assert fields(*first) == fields(*codec.decode_infer_request(
        "m", "2", json.loads(header), binary))
    assert len(known._kept) == 1
    other_a, other_b = bytes(reversed(A)), bytes(reversed(B))
    again = known.decode("n", "", header, memoryview(other_a + other_b))
    assert fields(*again) == fields(*codec.decode_infer_request(
        "n", "", json.loads(header), memoryview(other_a + other_b)))
    assert bytes(again[0].inputs[0].data) == other_a  # this request's bytes, not the first's
    again[0].requested_outputs.append("X")  # each request has its own list
    assert known.decode("m", "", header, binary)[0].requested_outputs == ["OUT", "JSON"]


def test_no_outputs_listed_stays_none():
    known = KnownHeaders()
    header, binary = body({"inputs": PLAIN["inputs"],
                           "parameters": {"binary_data_output": True}}, A, B)
    for _ in range(2):
        request, plan = known.decode("m", "", header, binary)
        assert request.requested_outputs is None and plan.default_binary is True
    assert len(known._kept) == 1


@pytest.mark.parametrize("extra", [
    {"id": "r1"},
    {"parameters": {"priority": 2}},
    {"parameters": {"sequence_id": 7, "sequence_start": True}},
    {"parameters": {"timeout": 100}},
    {"parameters": {"custom": "x"}},
])
def test_headers_with_an_id_or_parameters_are_decoded_in_full_each_time(extra):
    known = KnownHeaders()
    header, binary = body({**PLAIN, **extra}, A, B)
    for _ in range(2):
        request, plan = known.decode("m", "", header, binary)
        assert fields(request, plan) == fields(*codec.decode_infer_request(
            "m", "", json.loads(header), binary))
    assert known._kept == {}


def test_json_data_and_shared_memory_are_decoded_in_full_each_time():
    known = KnownHeaders()
    with_data = {"inputs": [binary_input("A", A, [1, 4]),
                            {"name": "C", "datatype": "INT32", "shape": [0], "data": []}]}
    with_shm = {"inputs": [binary_input("A", A, [1, 4])],
                "outputs": [{"name": "OUT", "parameters": {
                    "shared_memory_region": "r", "shared_memory_byte_size": 16}}]}
    for header in (with_data, with_shm):
        for _ in range(2):
            known.decode("m", "", *body(header, A))
    assert known._kept == {}


def test_a_known_header_with_a_binary_section_of_another_size_fails_as_before():
    known = KnownHeaders()
    header, binary = body(PLAIN, A, B)
    known.decode("m", "", header, binary)
    with pytest.raises(ServerError) as longer:
        known.decode("m", "", header, memoryview(A + B + b"\0\0\0\0"))
    assert "unexpected additional input data for model 'm'" in str(longer.value)
    with pytest.raises(ServerError) as shorter:
        known.decode("m", "", header, memoryview(A + B[:-4]))
    assert "unexpected size for input 'B'" in str(shorter.value)


def test_the_headers_kept_are_bounded():
    known = KnownHeaders()
    for n in range(1, KEPT_MAX + 10):
        data = bytes(4 * n)
        header, binary = body({"inputs": [binary_input("A", data, [n])]}, data)
        request, _ = known.decode("m", "", header, binary)
        assert request.inputs[0].shape == (n,)
        assert len(known._kept) <= KEPT_MAX
