"""Fuzzing the zttp gRPC transport with hypothesis: random sequences of HTTP/2 frames
(headers of known and unknown methods, grpc-timeout and grpc-encoding values, DATA
carrying gRPC's length-prefixed messages whole, split, compressed, truncated or lying
about their length, client trailers, resets, pings, settings, window updates, garbage
frames), cut at random points, into a GrpcConnection over a fake transport, with the
service's real method handlers over a servicer that echoes.

Whatever arrives, nothing raises out of the connection or any task it starts, what it
writes is whole HTTP/2 frames, and once the client is gone it holds no call and no
pending request. A few seconds by default; PBSERVE_FUZZ_EXAMPLES=N runs N examples
(e.g. 20000, for a longer search on demand)."""

from __future__ import annotations

import asyncio
import os
import struct
import zlib
from typing import Any

import grpc
import hpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hyperframe.frame import GoAwayFrame, PingFrame, SettingsFrame
from tritonclient.grpc import service_pb2 as pb

from h2_raw import INFER, PREFACE, STREAM_INFER
from pbserve.server.error_log import ErrorLog
from pbserve.server.grpc.h2.connection import GrpcConnection
from pbserve.server.grpc.h2.frames import FrameScanner
from pbserve.server.grpc.h2.limits import GrpcLimits
from pbserve.server.grpc.h2.server import h2_handlers
from pbserve.server.grpc.handlers import Undecodable
from pbserve.server.grpc.h2.pending import PendingRequests
from pbserve.server.connections import ConnectionSet

EXAMPLES = int(os.environ.get("PBSERVE_FUZZ_EXAMPLES", "150"))
LIVE = "/inference.GRPCInferenceService/ServerLive"
PATHS = [INFER, INFER, STREAM_INFER, STREAM_INFER, LIVE,
         "/inference.GRPCInferenceService/Nope", "/x"]


class EchoServicer:
    """Every RPC of the service: ModelInfer echoes its request's bytes, ModelStreamInfer
    answers each message, the rest answer an empty response of their type."""

    errors = ErrorLog(__import__("logging").getLogger("pbserve.grpc"))

    async def model_infer_parts(self, body: bytes, context: Any) -> bytes:
        return bytes(body)

    async def ModelStreamInfer(self, requests: Any, context: Any) -> None:
        async for request in requests:
            if type(request) is Undecodable:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "undecodable")
            await context.write(pb.ModelStreamInferResponse())
            context.request_done()

    def __getattr__(self, name: str) -> Any:
        method = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name[name]
        response = getattr(pb, method.output_type.name)

        async def answer(request: Any, context: Any) -> Any:
            return response()
        return answer


class FakeServer:
    """What a GrpcConnection needs of H2GrpcServer."""

    def __init__(self) -> None:
        limits = GrpcLimits(max_pending_per_connection=4, max_pending=6)
        self.handlers = h2_handlers(EchoServicer(), None)
        self.gatherers: dict = {}  # messages this small are never gathered (GATHER_MIN_BYTES)
        self.limit = 1 << 16
        self.limits = limits
        self.connections = ConnectionSet(limits)
        self.pending = PendingRequests(limits.max_pending_per_connection, limits.max_pending)
        self.closing = False


class FakeTransport(asyncio.Transport):
    def __init__(self, protocol: GrpcConnection) -> None:
        super().__init__()
        self.protocol = protocol
        self.out = bytearray()
        self.closing = False
        self.paused = False

    def write(self, data: Any) -> None:
        assert not self.closing or True
        self.out += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    abort = close

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("fuzz", 0) if name == "peername" else default


# --- frames (built by hand: hyperframe refuses some of what a fuzzer wants to send) ---

DATA, HEADERS, RST_STREAM, WINDOW_UPDATE, CONTINUATION = 0x0, 0x1, 0x3, 0x8, 0x9
END_STREAM, END_HEADERS = 0x1, 0x4


def raw(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags])
            + stream.to_bytes(4, "big") + payload)


streams = st.sampled_from([1, 1, 3, 3, 5, 7, 2, 0])


def grpc_framed(body: bytes, compressed: bool, lie: int) -> bytes:
    payload = zlib.compress(body) if compressed else body
    return bytes([compressed]) + struct.pack(">I", max(0, len(payload) + lie)) + payload


messages = st.builds(
    grpc_framed,
    st.one_of(st.binary(max_size=64),
              st.builds(lambda: pb.ModelInferRequest(model_name="m").SerializeToString())),
    st.sampled_from([False, False, False, True]),
    st.sampled_from([0, 0, 0, 0, 0, 0, -1, 1, 1 << 20]))


@st.composite
def headers_frame(draw: Any, stream: int | None = None, end: bool | None = None) -> bytes:
    fields = [(":method", draw(st.sampled_from(["POST", "POST", "POST", "GET"]))), (":scheme", "http"),
              (":path", draw(st.sampled_from(PATHS))), (":authority", "fuzz"),
              ("content-type", "application/grpc"), ("te", "trailers")]
    if draw(st.integers(0, 3)) == 0:
        fields.append(("grpc-timeout", draw(st.sampled_from(
            ["1n", "5m", "100S", "1H", "99999999M", "x", "", "123456789S", "10"]))))
    if draw(st.integers(0, 3)) == 0:
        fields.append(("grpc-encoding", draw(st.sampled_from(["gzip", "deflate", "zz"]))))
    if draw(st.integers(0, 5)) == 0:
        fields = draw(st.permutations(fields))
    block = hpack.Encoder().encode(fields)
    end = END_STREAM if (draw(st.booleans()) if end is None else end) else 0
    stream = draw(streams) if stream is None else stream
    if draw(st.integers(0, 5)) == 0:  # a header block in two pieces (or never ended)
        cut = draw(st.integers(0, len(block)))
        return (raw(HEADERS, end, stream, block[:cut])
                + raw(CONTINUATION, draw(st.sampled_from([END_HEADERS, 0])), stream,
                      block[cut:]))
    return raw(HEADERS, end | END_HEADERS, stream, block)


@st.composite
def trailers_frame(draw: Any) -> bytes:
    block = hpack.Encoder().encode([("x-trailer", draw(st.text(max_size=8)))])
    return raw(HEADERS, END_HEADERS | END_STREAM, draw(streams), block)


@st.composite
def data_frames(draw: Any) -> bytes:
    stream = draw(streams)
    payload = b"".join(draw(st.lists(messages, max_size=3)))
    if draw(st.booleans()):
        payload = payload[:draw(st.integers(0, len(payload)))]
    return raw(DATA, END_STREAM if draw(st.booleans()) else 0, stream, payload)


frame = st.one_of(
    headers_frame(), headers_frame(), data_frames(), data_frames(), trailers_frame(),
    st.builds(lambda s, c: raw(RST_STREAM, 0, s, c.to_bytes(4, "big")), streams,
              st.integers(0, 13)),
    st.builds(lambda d: PingFrame(0, opaque_data=d).serialize(), st.binary(min_size=8, max_size=8)),
    st.builds(lambda v: SettingsFrame(0, settings={0x4: v}).serialize(),
              st.integers(0, 2**31 - 1)),
    st.just(SettingsFrame(0, flags={"ACK"}).serialize()),
    st.builds(lambda s, n: raw(WINDOW_UPDATE, 0, s, n.to_bytes(4, "big")), streams,
              st.integers(0, 2**31 - 1)),
    st.builds(lambda: GoAwayFrame(0, last_stream_id=1).serialize()),
    st.binary(min_size=9, max_size=40),  # anything at all
)


@st.composite
def calls(draw: Any) -> list[bytes]:
    """Whole calls on streams 1, 3, ... (headers, messages, an end of some kind), now
    and then out of order, with other frames among them."""
    frames = []
    for stream in range(1, 2 * draw(st.integers(1, 4)), 2):
        frames.append(draw(headers_frame(stream, end=False)))
        for message in draw(st.lists(messages, max_size=3)):
            frames.append(raw(DATA, 0, stream, message))
        frames.append(draw(st.sampled_from([
            raw(DATA, END_STREAM, stream, b""), b"",
            raw(RST_STREAM, 0, stream, (8).to_bytes(4, "big")),
            raw(HEADERS, END_HEADERS | END_STREAM, stream,
                hpack.Encoder().encode([("x-trailer", "1")]))])))
    if draw(st.integers(0, 4)) == 0:
        frames = draw(st.permutations(frames))
    for _ in range(draw(st.integers(0, 3))):
        frames.insert(draw(st.integers(0, len(frames))), draw(frame))
    return frames


async def drive(chunks: list[bytes], close: bool) -> tuple[FakeServer, GrpcConnection,
                                                             bytes, list]:
    loop = asyncio.get_running_loop()
    problems: list = []
    loop.set_exception_handler(lambda _, context: problems.append(context))
    server = FakeServer()
    connection = GrpcConnection(server)
    transport = FakeTransport(connection)
    connection.connection_made(transport)
    for chunk in chunks:
        if transport.closing:
            break
        connection.data_received(chunk)
        await asyncio.sleep(0)
    for _ in range(5):
        await asyncio.sleep(0)
    connection.expire(server.connections.now + 3600)  # every timeout passed
    if close or not transport.closing:
        transport.close()
    for _ in range(10):
        await asyncio.sleep(0)
    return server, connection, bytes(transport.out), problems


def whole_frames(out: bytes) -> None:
    pos = 0
    while pos < len(out):
        assert len(out) - pos >= 9, "a frame header cut short"
        length = int.from_bytes(out[pos:pos + 3], "big")
        assert pos + 9 + length <= len(out), "a frame cut short"
        pos += 9 + length


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.one_of(calls(), calls(), st.lists(frame, max_size=14)), st.data(), st.booleans())
def test_whatever_a_client_sends(frames, data, close):
    stream = PREFACE + SettingsFrame(0).serialize() + b"".join(frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)]) if b > a]
    server, connection, out, problems = asyncio.run(drive(chunks, close))
    assert not problems, problems
    whole_frames(out)
    assert not connection._calls, "calls held after the client left"
    assert server.pending.count == 0, "pending requests counted after the client left"


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([DATA, HEADERS, CONTINUATION, 0x4, 0x6]),
                          st.sampled_from([0, END_STREAM, END_HEADERS]),
                          st.binary(max_size=40)), max_size=8), st.data())
def test_the_frame_scanner_sees_the_same_wherever_a_read_ends(frames, data):
    """The timeouts' view of the stream (frames.py) does not depend on how TCP cut it:
    the same after one read, two, or a byte at a time; and whole frames leave none open."""
    stream = PREFACE + b"".join(raw(kind, flags, 1, payload) for kind, flags, payload in frames)
    cut = data.draw(st.integers(0, len(stream)))
    whole, two, bytewise = FrameScanner(), FrameScanner(), FrameScanner()
    whole.feed(stream)
    two.feed(stream[:cut])
    two.feed(stream[cut:])
    for at in range(len(stream)):
        bytewise.feed(stream[at:at + 1])
    views = {(s.in_frame, s.in_header_block) for s in (whole, two, bytewise)}
    assert len(views) == 1, views
    assert not whole.in_frame
    headers_open = [flags & END_HEADERS == 0 for kind, flags, _ in frames
                    if kind in (HEADERS, CONTINUATION)]
    assert whole.in_header_block == (headers_open[-1] if headers_open else False)
