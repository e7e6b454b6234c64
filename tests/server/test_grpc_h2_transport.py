"""The gRPC transport on zttp (`--grpc-transport zttp`): what it adds to the servicer that
test_grpc_frontend.py runs on both transports. Its request framing, compressed requests
(gzip, deflate), unknown methods, and a client connection that outlives
zttp's cap on streams per connection, and the receive window it offers."""

from __future__ import annotations

import gzip
import socket
import struct
import zlib
from pathlib import Path

import grpc
import numpy as np
import pytest
import zttp
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb

from client_inputs import grpc_input
from pbserve.server.grpc.h2.call import Compressed, Deframer, TooLarge, prefix, status_trailers
from pbserve.server.grpc.h2.connection import STREAMS_PER_CONNECTION
from pbserve.server.grpc.h2.window import RECEIVE_WINDOW, window_frames
from pbserve.testing import running_server

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"


def framed(message: bytes) -> bytes:
    return prefix(len(message)) + message


# --- request framing ------------------------------------------------------------------

def test_a_message_split_anywhere_comes_out_whole():
    data = framed(b"first message") + framed(b"") + framed(bytes(range(256)) * 40)
    for cut in (1, 3, 5, 6, 17, 20, len(data) - 1):
        deframer = Deframer(1 << 20)
        got = deframer.feed(data[:cut]) + deframer.feed(data[cut:])
        assert got == [b"first message", b"", bytes(range(256)) * 40], cut


def test_an_empty_message_at_the_end_of_a_chunk_is_not_held_back():
    assert Deframer(10).feed(framed(b"ab") + framed(b"")) == [b"ab", b""]
    assert Deframer(10).feed(framed(b"")) == [b""]


def test_one_chunk_per_byte():
    deframer = Deframer(100)
    data = framed(b"abc") + framed(b"de")
    got = [m for i in range(len(data)) for m in deframer.feed(data[i:i + 1])]
    assert got == [b"abc", b"de"]


def test_a_message_past_the_limit_is_refused_from_its_prefix():
    deframer = Deframer(10)
    with pytest.raises(TooLarge, match=r"Received message larger than max \(11 vs. 10\)"):
        deframer.feed(prefix(11))  # before any of its body arrived


@pytest.mark.parametrize("encoding, compress", [
    ("gzip", gzip.compress), ("deflate", zlib.compress)])
def test_compressed_messages_are_inflated_within_the_limit(encoding, compress):
    body = compress(b"x" * 1000)
    message = b"\x01" + len(body).to_bytes(4, "big") + body
    assert Deframer(1000, encoding).feed(message) == [b"x" * 1000]
    with pytest.raises(TooLarge, match=r"\(1000 vs. 999\)"):  # as it is inflated
        Deframer(999, encoding).feed(message)


def test_a_compressed_message_in_no_known_encoding_is_refused():
    with pytest.raises(Compressed, match="grpc-encoding 'identity'"):
        Deframer(100).feed(b"\x01" + (3).to_bytes(4, "big") + b"abc")
    with pytest.raises(Compressed, match="does not inflate as gzip"):
        Deframer(100, "gzip").feed(b"\x01" + (3).to_bytes(4, "big") + b"abc")


# --- the receive window -------------------------------------------------------------

def test_spaces_at_the_ends_of_a_status_message_are_percent_encoded():
    """A field value may not begin or end with a space (RFC 9113): grpc-core drops the
    trailers and its client hangs; Triton's shape error ends with ". "."""
    def message(details: str) -> bytes:
        return dict(status_trailers(grpc.StatusCode.INVALID_ARGUMENT, details))[b"grpc-message"]
    assert message("Expected [16], got [8]. ") == b"Expected [16], got [8].%20"
    assert message("  x ") == b"%20%20x%20"
    assert message("   ") == b"%20%20%20"
    assert message("a b") == b"a b"


def test_the_window_frames_raise_a_zttp_clients_send_windows():
    """A client (zttp's own, here) that reads the server's preface and the window frames
    may send RECEIVE_WINDOW bytes on the connection and on each stream."""
    server = zttp.Connection(zttp.SERVER, zttp.HTTP2)
    server.initiate_connection()
    client = zttp.Connection(zttp.CLIENT, zttp.HTTP2)
    client.initiate_connection()
    client.receive_data(server.data_to_send() + window_frames())
    while client.next_event() is not zttp.NEED_DATA:
        pass
    stream = client.send_request(b"POST", b"/inference.GRPCInferenceService/ModelInfer",
                                 b"HTTP/2", [(b"content-type", b"application/grpc")])
    assert client.send_window == RECEIVE_WINDOW
    assert stream.send_window == RECEIVE_WINDOW


@pytest.mark.parametrize("size", [65_534, 65_535, 2**31])
def test_a_window_outside_http2s_bounds_is_refused(size):
    with pytest.raises(ValueError, match="window"):
        window_frames(size)


def _frames(sock: socket.socket) -> list[tuple[int, int, bytes]]:
    """(type, stream, payload) of the frames a server sends, up to and with its first
    WINDOW_UPDATE on stream 0 (or what came within 10 s)."""
    sock.settimeout(10)
    data, frames = b"", []
    try:
        while chunk := sock.recv(65536):
            data += chunk
            while len(data) >= 9 and len(data) >= 9 + int.from_bytes(data[:3], "big"):
                length = int.from_bytes(data[:3], "big")
                kind, stream = data[3], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
                frames.append((kind, stream, data[9:9 + length]))
                data = data[9 + length:]
                if kind == 0x8 and stream == 0:
                    return frames
    except TimeoutError:
        pass
    return frames


# --- a real server --------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("h2") / "server.log"
    with running_server(EXAMPLES, log_path=log, args=[
            "--grpc-transport", "zttp", "--model-control-mode", "explicit",
            "--load-model", "identity"]) as srv:
        yield srv


def infer_once(client: grpcclient.InferenceServerClient, **kwargs) -> None:
    data = np.arange(4, dtype=np.int32)
    result = client.infer("identity", [grpc_input("INPUT_INT32", data)], **kwargs)
    assert (result.as_numpy("OUTPUT_INT32") == data).all()


def test_a_new_connection_is_offered_the_larger_window(server):
    """On the wire: SETTINGS_INITIAL_WINDOW_SIZE and the connection's WINDOW_UPDATE
    raise both windows to RECEIVE_WINDOW (the client's own preface first)."""
    host, port = server.grpc_url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        empty_settings = bytes([0, 0, 0, 0x4, 0, 0, 0, 0, 0])
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + empty_settings)
        frames = _frames(sock)
    settings = {}
    for kind, stream, payload in frames:
        if kind == 0x4 and stream == 0:
            for at in range(0, len(payload), 6):
                key, value = struct.unpack(">HI", payload[at:at + 6])
                settings[key] = value
    updates = sum(int.from_bytes(p, "big") for k, s, p in frames if k == 0x8 and s == 0)
    assert settings.get(0x4) == RECEIVE_WINDOW
    assert 65_535 + updates == RECEIVE_WINDOW


def test_a_large_request_crosses_the_larger_window(server):
    """A client sends 16 MiB without waiting for credit: zttp takes DATA past the
    window it advertised itself, and the answer, written out in pieces (the last one
    short), is whole."""
    data = np.arange(4 * 1024 * 1024 + 3, dtype=np.int32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("identity", [grpc_input("INPUT_INT32", data)])
        assert (result.as_numpy("OUTPUT_INT32") == data).all()


def test_a_large_streamed_response_is_whole(server):
    """ModelStreamInfer's large messages go out in pieces too (grpc's own stub here, with
    a deadline: a broken stream fails the test rather than hanging it)."""
    data = np.arange(2 * 1024 * 1024 + 5, dtype=np.int32)
    request = pb.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT_INT32", datatype="INT32", shape=[data.size])
    request.raw_input_contents.append(data.tobytes())
    with grpc.insecure_channel(server.grpc_url, options=[
            ("grpc.max_receive_message_length", -1)]) as channel:
        stream = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelStreamInferResponse.FromString)
        replies = list(stream(iter([request, request]), timeout=30))
    assert len(replies) == 2
    for reply in replies:
        assert not reply.error_message
        assert reply.infer_response.raw_output_contents[0] == data.tobytes()


def test_one_client_makes_more_calls_than_a_connection_carries(server):
    """zttp refuses a connection's 4,097th stream; the server's GOAWAY before it moves
    the client to a new connection without a failed call."""
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for _ in range(STREAMS_PER_CONNECTION + 200):
            assert client.is_server_live()
        infer_once(client)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_are_answered(server, algorithm):
    data = np.zeros(64 * 1024, np.int32)  # compressible: the client does compress it
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("identity", [grpc_input("INPUT_INT32", data)],
                              compression_algorithm=algorithm)
        assert (result.as_numpy("OUTPUT_INT32") == data).all()


def test_an_unknown_method_is_unimplemented(server):
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/NoSuchMethod",
                                   request_serializer=pb.ServerLiveRequest.SerializeToString,
                                   response_deserializer=pb.ServerLiveResponse.FromString)
        with pytest.raises(grpc.RpcError) as info:
            call(pb.ServerLiveRequest(), timeout=10)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "NoSuchMethod" in info.value.details()
