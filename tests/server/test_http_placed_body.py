"""A large HTTP infer body gathered as it arrives, its binary inputs straight into blocks
of the parent's shm pool (server/http/placed_body.py), and what the codec makes of it."""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from fakes import FakePlacer, move_out
from pbserve.core.memory.input_placer import InputPlacer
from pbserve.core.memory.block_refs import BlockRefs
from pbserve.errors import ServerError
from pbserve.server.http import codec
from pbserve.server.http.placed_body import PlacedBody
from pbserve.testing import running_server
from shm import Pool, new_prefix

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"


def binary_input(name: str, data: bytes) -> dict:
    return {"name": name, "datatype": "UINT8", "shape": [len(data)],
            "parameters": {"binary_data_size": len(data)}}


def big_body() -> tuple[bytes, int, list[bytes]]:
    """Four inputs: binary, JSON data, binary of 0 bytes, binary: the body, its header's
    size and the binary inputs' bytes."""
    rng = np.random.default_rng(3)
    big = rng.integers(0, 255, 200_000, dtype=np.uint8).tobytes()
    tail = b"tail" * 3
    header = json.dumps({"id": "r1", "inputs": [
        binary_input("IN0", big),
        {"name": "IN1", "datatype": "INT32", "shape": [2], "data": [1, 2]},
        binary_input("IN2", b""),
        binary_input("IN3", tail)], "outputs": [{"name": "OUT"}]}).encode()
    return header + big + tail, len(header), [big, b"", tail]


def gather(body: bytes, header_size: int, cuts: list[int], placer) -> PlacedBody:
    placed = PlacedBody(len(body), header_size, placer)
    last = 0
    for cut in [*sorted(cuts), len(body)]:
        placed.add(body[last:cut])
        last = cut
    return placed


@pytest.mark.parametrize("seed", range(6))
def test_a_body_in_any_pieces_gives_each_binary_input_a_block(seed):
    body, header_size, binaries = big_body()
    rng = random.Random(seed)
    # cuts anywhere, always one inside the JSON header and one at its end
    cuts = [rng.randrange(1, header_size), header_size,
            *[rng.randrange(1, len(body)) for _ in range(rng.randrange(0, 8))]]
    placer = FakePlacer()
    placed = gather(body, header_size, cuts, placer)
    assert placed.value() is placed
    assert placed.header["id"] == "r1" and len(placed.header["inputs"]) == 4
    assert [bytes(view) for view, _ in placed.inputs] == binaries
    assert placer.placed == [200_000, 12]  # an input of 0 bytes needs no block
    handles = [handle for _, handle in placed.inputs if handle is not None]
    placed.release()
    placed.release()  # idempotent
    assert placer.dropped == handles


@pytest.mark.parametrize("header", [
    b'{"inputs": [',  # not JSON
    b'[1, 2]',  # not an object
    b'{"inputs": {"name": "IN0"}}',  # inputs not an array
    json.dumps({"inputs": [{"name": "IN0", "datatype": "UINT8", "shape": [1],
                            "parameters": {"binary_data_size": -1}}]}).encode(),
    json.dumps({"inputs": [{"name": "IN0", "datatype": "UINT8", "shape": [1],
                            "parameters": {"binary_data_size": None}}]}).encode(),
    json.dumps({"inputs": [binary_input("IN0", bytes(69_999))]}).encode(),  # too few
    json.dumps({"inputs": [binary_input("IN0", bytes(70_001))]}).encode(),  # too many
])
def test_a_header_that_does_not_place_the_body_keeps_it_whole(header):
    """The codec then reads the whole body as it does any other, with Triton's errors."""
    body = header + bytes(range(256)) * 273 + bytes(70_000 - 256 * 273)
    placer = FakePlacer()
    placed = gather(body, len(header), [3, len(header) + 5], placer)
    assert bytes(placed.value()) == body
    assert placer.placed == []
    placed.release()


def test_a_placer_that_declines_leaves_the_inputs_in_memory():
    body, header_size, binaries = big_body()
    placer = FakePlacer(decline=True)
    placed = gather(body, header_size, [10, header_size + 7], placer)
    assert [bytes(view) for view, _ in placed.inputs] == binaries
    assert all(handle is None for _, handle in placed.inputs)
    placed.release()
    assert placer.dropped == []


def test_the_codec_hands_each_tensor_its_placed_block():
    body, header_size, binaries = big_body()
    placed = gather(body, header_size, [], FakePlacer())
    request, _ = codec.decode_infer_request("m", "", placed.header, placed.inputs)
    by_name = {t.name: t for t in request.inputs}
    assert bytes(by_name["IN0"].data) == binaries[0]
    assert by_name["IN0"].placed is placed.inputs[0][1]
    assert by_name["IN1"].placed is None and bytes(by_name["IN1"].data) == \
        np.array([1, 2], np.int32).tobytes()
    assert bytes(by_name["IN3"].data) == binaries[2]
    assert by_name["IN3"].placed is placed.inputs[2][1]
    assert request.id == "r1" and request.requested_outputs == ["OUT"]


def test_the_codec_refuses_a_placed_request_as_it_refuses_the_whole_body():
    """An error the header holds past the sizes (a bad datatype here) reads the same."""
    data = bytes(80_000)
    header = json.dumps({"inputs": [binary_input("IN0", data),
                                    {"name": "IN1", "datatype": 7, "shape": [1],
                                     "data": [1]}]}).encode()
    placed = gather(header + data, len(header), [], FakePlacer())
    with pytest.raises(ServerError) as from_placed:
        codec.decode_infer_request("m", "", placed.header, placed.inputs)
    with pytest.raises(ServerError) as from_whole:
        codec.decode_infer_request("m", "", json.loads(header), memoryview(data))
    assert str(from_placed.value) == str(from_whole.value)
    assert "Unable to parse 'datatype' of input 'IN1'" in str(from_placed.value)


def test_placed_blocks_come_from_the_pool_and_go_back_to_it():
    pool = Pool(new_prefix() + "-test", 1 << 20, 1 << 20)
    try:
        body, header_size, binaries = big_body()
        placer = InputPlacer(BlockRefs(pool))
        placed = gather(body, header_size, [header_size], placer)
        assert pool.live_blocks == 2
        assert [bytes(view) for view, _ in placed.inputs] == binaries
        placed.release()
        assert pool.live_blocks == 0
    finally:
        pool.close()


def test_an_input_gets_its_block_only_when_its_bytes_come():
    """A client that stops sending holds no block for an input it has not started."""
    body, header_size, binaries = big_body()
    placer = FakePlacer()
    placed = PlacedBody(len(body), header_size, placer)
    placed.add(body[:header_size])
    assert placer.placed == []  # the header alone: nothing placed yet
    placed.add(body[header_size:header_size + 10])
    assert placer.placed == [200_000]
    placed.release()
    assert len(placer.dropped) == 1


# --- a real server ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("placed") / "server.log"
    with running_server(EXAMPLES, log_path=log, args=[
            "--model-control-mode", "explicit", "--load-model", "identity",
            "--load-model", "add_sub"]) as srv:
        yield srv


def http_input(name: str, array: np.ndarray) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array, binary_data=True)
    return tensor


def test_large_requests_over_http_are_answered_from_their_placed_tensors(server):
    with httpclient.InferenceServerClient(server.http_url) as client:
        for size in (1 << 15, 1 << 18, 1 << 18, (1 << 22) + 3):
            data = np.arange(size, dtype=np.int32)
            result = client.infer("identity", [http_input("INPUT_INT32", data)])
            assert (result.as_numpy("OUTPUT_INT32") == data).all()


def test_a_large_request_with_an_error_is_refused_in_tritons_words(server):
    a = np.zeros(1 << 18, np.float32)
    with httpclient.InferenceServerClient(server.http_url) as client:
        with pytest.raises(InferenceServerException, match=(
                r"unexpected shape for input 'INPUT0' for model 'add_sub'. Expected \[16\], "
                r"got \[262144\]")):
            client.infer("add_sub", [http_input("INPUT0", a), http_input("INPUT1", a)])
        with pytest.raises(InferenceServerException, match="unknown model|not found"):
            client.infer("no_such_model", [http_input("INPUT0", a)])
        data = np.arange(1 << 18, dtype=np.int32)
        result = client.infer("identity", [http_input("INPUT_INT32", data)])
        assert (result.as_numpy("OUTPUT_INT32") == data).all()


def test_a_client_gone_halfway_through_its_upload_leaves_the_server_serving(server):
    """Half a large body, then the connection closed: the half-filled block goes back
    (the connection's accounting is checked against a counting placer in
    test_http_frontend.py)."""
    header = json.dumps({"inputs": [{"name": "INPUT_INT32", "datatype": "INT32",
                                     "shape": [1 << 18],
                                     "parameters": {"binary_data_size": 1 << 20}}]}).encode()
    host, port = server.http_url.rsplit(":", 1)
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: %d\r\nInference-Header-Content-Length: %d\r\n\r\n"
                         % (len(header) + (1 << 20), len(header)) + header + bytes(1 << 19))
    data = np.arange(1 << 18, dtype=np.int32)
    with httpclient.InferenceServerClient(server.http_url) as client:
        result = client.infer("identity", [http_input("INPUT_INT32", data)])
        assert (result.as_numpy("OUTPUT_INT32") == data).all()


def test_a_tensor_moved_out_under_pressure_leaves_no_mapping_of_its_block():
    """The body hands its inputs over to the request and keeps no view on them: else a
    region the pool gave back under pressure (InputPlacer.relieve) stays mapped, and its
    pages stay taken in /dev/shm until the request ends, while the running stubs wait
    for room for their outputs (tests/core/test_small_shm.py)."""
    pool = Pool(new_prefix() + "-test", 1 << 20, 1 << 20)
    try:
        placer = InputPlacer(BlockRefs(pool), room=lambda: (1 << 30, 1 << 30))
        body, header_size, binaries = big_body()
        placed = gather(body, header_size, [header_size], placer)
        request, _ = codec.decode_infer_request("m", "", placed.header, placed.hand_over())
        data, unmapped = move_out(pool, placer, request)
        assert data == binaries[0]
        assert unmapped
        placed.release()
    finally:
        pool.close()
