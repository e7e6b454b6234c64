"""A large ModelInfer request gathered field by field as it arrives, its tensors straight
into the parent's shm pool (grpc/wire.py RequestGatherer, core/memory/input_placer.py), and
taken over by the request without a copy of their own."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from client_inputs import grpc_input
from fakes import FakePlacer, move_out
from pbserve.core.memory.input_placer import InputPlacer
from pbserve.core.memory.block_refs import BlockRefs
from pbserve.core.types import InferRequest, TensorData
from pbserve.server.grpc.h2.call import GATHER_MIN_BYTES, Deframer, prefix
from pbserve.server.grpc.codec import decode_infer_request
from pbserve.server.grpc.wire import RequestGatherer, SplitRequest, parse_infer_request
from pbserve.testing import load_models, running_server
from shm import Pool, new_prefix

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"


def big_request() -> tuple[pb.ModelInferRequest, list[bytes]]:
    rng = np.random.default_rng(5)
    raw = [rng.integers(0, 255, 200_000, dtype=np.uint8).tobytes(), b"", b"tail" * 3]
    request = pb.ModelInferRequest(model_name="m", model_version="2", id="req-1")
    for i, data in enumerate(raw):
        request.inputs.add(name=f"IN{i}", datatype="UINT8", shape=[len(data)])
    request.outputs.add(name="OUT")
    request.parameters["sequence_id"].int64_param = 1 << 40
    request.raw_input_contents.extend(raw)
    return request, raw


def gather(message: bytes, cuts: list[int], placer) -> SplitRequest:
    gatherer = RequestGatherer(len(message), placer)
    view = memoryview(message)
    last = 0
    for cut in [*cuts, len(message)]:
        gatherer.feed(view[last:cut])
        last = cut
    return gatherer.result()


def test_a_request_gathered_in_any_pieces_parses_as_the_whole_message():
    request, raw = big_request()
    message = request.SerializeToString()
    rng = random.Random(3)
    cut_sets = [[1], [2, 3, 4, 5], list(range(1, 40)), sorted(rng.sample(range(1, len(message)), 50))]
    for cuts in cut_sets:
        placer = FakePlacer()
        split = gather(message, cuts, placer)
        parsed, contents = parse_infer_request(split)
        assert [bytes(c) for c in contents] == raw
        assert parsed.model_name == "m" and parsed.id == "req-1"
        assert parsed.parameters["sequence_id"].int64_param == 1 << 40
        assert [i.name for i in parsed.inputs] == ["IN0", "IN1", "IN2"]
        assert not parsed.raw_input_contents  # the contents are in their own buffers
        assert placer.placed == [len(raw[0]), len(raw[2])]  # an empty one needs no place


def test_a_placer_that_declines_leaves_the_contents_in_memory():
    request, raw = big_request()
    split = gather(request.SerializeToString(), [7, 1000], FakePlacer(decline=True))
    assert [bytes(c) for c in split.raw] == raw
    assert split.handles == [None, None, None]


def test_sizes_past_the_message_are_refused_before_anything_is_placed():
    request, _ = big_request()
    message = bytearray(request.SerializeToString())
    placer = FakePlacer()
    with pytest.raises(DecodeError):
        gather(bytes(message[:-1]), [], placer)  # the message says one byte more
    # a raw field that claims more bytes than the message has
    field = b"\x3a" + (10**9).to_bytes(5, "little")[:4] + b"\x7f" + b"x" * 10
    lying = bytes(field).ljust(GATHER_MIN_BYTES, b"\0")
    placer = FakePlacer()
    with pytest.raises(DecodeError):
        gather(lying, [], placer)
    assert placer.placed == []


def test_release_and_discard_give_back_what_no_request_took():
    request, _ = big_request()
    message = request.SerializeToString()
    placer = FakePlacer()
    split = gather(message, [], placer)
    kept = split.handles[0]
    split.handles[0] = None  # a request took it over
    split.release()
    split.release()  # at most once
    assert len(placer.dropped) == 1 and placer.dropped[0] is not kept
    half = RequestGatherer(len(message), placer)
    half.feed(memoryview(message)[:len(message) // 2])
    half.discard()
    assert len(placer.dropped) == 2


def test_the_deframer_hands_only_large_uncompressed_messages_to_the_gatherer():
    request, raw = big_request()
    message = request.SerializeToString()
    placer = FakePlacer()
    deframer = Deframer(1 << 24, gatherer=lambda n: RequestGatherer(n, placer))
    data = prefix(5) + b"small" + prefix(len(message)) + message
    got = deframer.feed(data[:100]) + deframer.feed(data[100:])
    assert got[0] == b"small"
    assert type(got[1]) is SplitRequest and [bytes(c) for c in got[1].raw] == raw
    declining = Deframer(1 << 24, gatherer=lambda n: None)
    assert declining.feed(prefix(len(message)) + message) == [message]


def test_placed_blocks_come_back_to_the_pool():
    pool = Pool(new_prefix() + "-test", 1 << 20, 1 << 20)
    try:
        placer = InputPlacer(BlockRefs(pool))
        request, raw = big_request()
        split = gather(request.SerializeToString(), [300], placer)
        assert pool.live_blocks == 2
        assert bytes(split.raw[0]) == raw[0]
        split.release()
        assert pool.live_blocks == 0
    finally:
        pool.close()


def test_placing_leaves_half_of_dev_shm_free():
    """`place` declines (the frontend gathers in memory) when less than half of /dev/shm
    would stay free: what runs needs the rest for its inputs and outputs."""
    pool = Pool(new_prefix() + "-test", 1 << 20, 1 << 20)
    free = [10 << 20]
    try:
        placer = InputPlacer(BlockRefs(pool), room=lambda: (free[0], 16 << 20))
        assert placer.place(2 << 20) is not None  # 8 MiB of 16 stay free
        assert placer.place((2 << 20) + 1) is None
        free[0] = 16 << 20
        assert placer.place(8 << 20) is not None
    finally:
        pool.close()


def test_under_pressure_waiting_tensors_move_out_of_shm_and_nothing_is_placed():
    pool = Pool(new_prefix() + "-test", 1 << 20, 1 << 20)
    try:
        placer = InputPlacer(BlockRefs(pool), room=lambda: (1 << 30, 1 << 30))
        view, placed = placer.place(300_000)
        view[:] = bytes(range(200)) * 1500
        tensor = TensorData("IN", "UINT8", (300_000,), view, None, placed)
        placed.park(tensor)  # its request waits for an instance
        _, running = placer.place(1000)
        assert running.take()  # a request that runs: not moved
        assert pool.live_blocks == 2
        assert placer.relieve() == placed.block.nbytes
        assert tensor.placed is None and tensor.data == bytes(range(200)) * 1500
        assert not placed.take() and pool.live_blocks == 1  # its block went back
        assert placer.place(1000) is None  # nothing placed right after the pressure
        assert placer.relieve() == 0
    finally:
        pool.close()


def test_a_tensor_moved_out_under_pressure_leaves_no_mapping_of_its_block():
    """parse_infer_request hands the contents over: the SplitRequest keeps no view on a
    placed block (its pages would stay taken in /dev/shm after InputPlacer.relieve)."""
    pool = Pool(new_prefix() + "-test", 1 << 20, 1 << 20)
    try:
        placer = InputPlacer(BlockRefs(pool), room=lambda: (1 << 30, 1 << 30))
        request, raw = big_request()
        split = gather(request.SerializeToString(), [], placer)
        parsed, contents = parse_infer_request(split)
        infer_request, _ = decode_infer_request(parsed, "2", contents, split.handles)
        del contents
        data, unmapped = move_out(pool, placer, infer_request)
        assert data == raw[0]
        assert unmapped
        split.release()
    finally:
        pool.close()


# --- the backend takes a placed block over ---------------------------------------------

def test_a_request_takes_its_placed_input_without_a_copy():
    with load_models(EXAMPLES, models=["identity"]) as loaded:
        manager = loaded.manager
        data = np.arange(300_000, dtype=np.int32)

        async def run() -> tuple[np.ndarray, bool, int, int]:
            placer = manager.input_placer()
            before = manager._pool.live_blocks
            view, placed = placer.place(data.nbytes)
            view[:] = memoryview(data).cast("B")
            request = InferRequest("identity", inputs=[TensorData(
                "INPUT_INT32", "INT32", (data.size,), view, None, placed)])
            response = await manager.model_handle("identity").infer(request)
            out = np.frombuffer(response.outputs[0].data, np.int32).copy()
            during = manager._pool.live_blocks
            response.release()
            placer.drop(placed)  # the frontend's release: a no-op once taken
            return out, placed.take(), during - before, manager._pool.live_blocks - before

        out, still_the_frontends, during, after = loaded._run(run())
        assert (out == data).all()
        assert not still_the_frontends  # the request took the block: no copy of its own
        assert during == 1  # that one block, lent to the response (identity)
        assert after == 0


# --- a real server ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("gather") / "server.log"
    with running_server(EXAMPLES, log_path=log, args=[
            "--model-control-mode", "explicit", "--load-model", "identity",
            "--load-model", "add_sub"]) as srv:
        yield srv


def test_large_requests_over_grpc_are_answered_from_their_gathered_tensors(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for size in (1 << 18, 1 << 18, (1 << 22) + 3):
            data = np.arange(size, dtype=np.int32)
            result = client.infer("identity", [grpc_input("INPUT_INT32", data)])
            assert (result.as_numpy("OUTPUT_INT32") == data).all()


def test_a_large_request_with_an_error_is_refused_and_the_server_goes_on(server):
    """Refused in Triton's words (the shape error's message ends in a space, which the
    trailer carries percent-encoded: a client used to wait out its deadline)."""
    a = np.zeros(1 << 18, np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException, match=(
                r"unexpected shape for input 'INPUT0' for model 'add_sub'. Expected \[16\], "
                r"got \[262144\]. $")):
            client.infer("add_sub", [grpc_input("INPUT0", a), grpc_input("INPUT1", a)],
                         client_timeout=60)
        with pytest.raises(InferenceServerException, match="unknown model|not found"):
            client.infer("no_such_model", [grpc_input("INPUT0", a)], client_timeout=60)
        data = np.arange(1 << 18, dtype=np.int32)
        result = client.infer("identity", [grpc_input("INPUT_INT32", data)])
        assert (result.as_numpy("OUTPUT_INT32") == data).all()


def test_a_call_reset_halfway_through_its_upload_leaves_the_server_serving(server):
    """A client that sends half of a large request and goes away: the half-gathered
    tensor is given back (the pool's accounting is checked in-process above)."""
    import h2.config
    import h2.connection
    import h2.settings

    request = pb.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT_INT32", datatype="INT32", shape=[1 << 18])
    request.raw_input_contents.append(bytes(1 << 20))
    body = prefix(request.ByteSize()) + request.SerializeToString()
    host, port = server.grpc_url.rsplit(":", 1)
    for reset in (True, False):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            conn.increment_flow_control_window(1 << 24)
            conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24})
            conn.send_headers(1, [(":method", "POST"), (":scheme", "http"),
                                  (":path", "/inference.GRPCInferenceService/ModelInfer"),
                                  (":authority", "x"), ("content-type", "application/grpc"),
                                  ("te", "trailers")])
            sock.sendall(conn.data_to_send())
            sent = 0
            while sent < len(body) // 2:
                window = min(conn.local_flow_control_window(1), conn.max_outbound_frame_size)
                if window <= 0:
                    conn.receive_data(sock.recv(65536))
                    continue
                conn.send_data(1, body[sent:sent + window])
                sent += window
                sock.sendall(conn.data_to_send())
            if reset:
                conn.reset_stream(1)
                sock.sendall(conn.data_to_send())
    data = np.arange(1 << 18, dtype=np.int32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("identity", [grpc_input("INPUT_INT32", data)])
        assert (result.as_numpy("OUTPUT_INT32") == data).all()
