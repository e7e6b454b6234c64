"""A raw HTTP/2 gRPC client for the tests that misbehave on purpose: the `h2` package
builds the frames (or hyperframe, for the ones h2 would refuse to send), over a plain
socket, so a test sends exactly what an attacker would and reads (or does not read)
what the server answers."""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.settings
import hpack
import numpy as np
import tritonclient.grpc as grpcclient
from hyperframe.frame import ContinuationFrame, DataFrame, HeadersFrame, PingFrame, SettingsFrame
from tritonclient.grpc import service_pb2 as pb

from client_inputs import grpc_input

INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def infer_once(url: str) -> None:
    """One ordinary client's call to `identity`, answered right (tritonclient)."""
    data = np.arange(4, dtype=np.int32)
    with grpcclient.InferenceServerClient(url) as client:
        result = client.infer("identity", [grpc_input("INPUT_INT32", data)],
                              client_timeout=30)
        assert (result.as_numpy("OUTPUT_INT32") == data).all()


def rss_kib(pid: int) -> int:
    """A process's resident set size (VmRSS), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def grpc_message(message: bytes) -> bytes:
    """gRPC's length-prefixed framing (uncompressed)."""
    return b"\x00" + struct.pack(">I", len(message)) + message


def identity_request(n: int = 4, model: str = "identity") -> bytes:
    data = np.arange(n, dtype=np.int32)
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="INPUT_INT32", datatype="INT32", shape=[n])
    request.raw_input_contents.append(data.tobytes())
    return request.SerializeToString()


def sleepy_request(ms: int, request_id: str = "") -> bytes:
    request = pb.ModelInferRequest(model_name="sleepy", id=request_id)
    request.inputs.add(name="SLEEP_MS", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([ms], np.int32).tobytes())
    return request.SerializeToString()


def headers(path: str, authority: str, extra: list[tuple[str, str]] = ()) -> list:
    return [(":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", authority), ("content-type", "application/grpc"),
            ("te", "trailers"), *extra]


class RawClient:
    """One HTTP/2 connection driven frame by frame."""

    def __init__(self, url: str, settings: dict[int, int] | None = None,
                 rcvbuf: int | None = None, timeout: float = 10.0) -> None:
        host, port = url.rsplit(":", 1)
        self.authority = url
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connecting: the window TCP offers follows it
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((host, int(port)))
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config)
        if settings:
            self.conn.local_settings = h2.settings.Settings(client=True,
                                                            initial_values=settings)
        self.conn.initiate_connection()
        self.flush()

    def ready(self) -> None:
        """Read the server's preface up to its larger window (window.py): the
        SETTINGS ack of ours, and the WINDOW_UPDATE on stream 0."""
        seen: set[type] = set()
        self.until(lambda e: seen.add(type(e)) or {h2.events.SettingsAcknowledged,
                                                   h2.events.WindowUpdated} <= seen)

    def flush(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def call(self, path: str, message: bytes | None, end: bool = True,
             extra: list[tuple[str, str]] = ()) -> int:
        """Open a stream with a call's headers (and its one message); its id."""
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, headers(path, self.authority, list(extra)),
                               end_stream=message is None and end)
        if message is not None:
            data, size = grpc_message(message), self.conn.max_outbound_frame_size
            for at in range(0, len(data), size):
                self.conn.send_data(stream, data[at:at + size],
                                    end_stream=end and at + size >= len(data))
        self.flush()
        return stream

    def events(self, timeout: float | None = None) -> list:
        """The events of what the server sends next ([] once it closed)."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        data = self.sock.recv(1 << 20)
        if not data:
            return []
        events = self.conn.receive_data(data)
        self.flush()  # acks, window updates
        return events

    def until(self, predicate, timeout: float = 10.0) -> list:
        """Events until one satisfies `predicate`; AssertionError if the connection
        closes or `timeout` passes first."""
        seen = []
        while True:
            try:
                batch = self.events(timeout)
            except (TimeoutError, socket.timeout):
                raise AssertionError(f"timed out; events so far: {seen[-5:]}") from None
            if not batch:
                raise AssertionError(f"connection closed; events so far: {seen[-5:]}")
            seen.extend(batch)
            if any(predicate(event) for event in batch):
                return seen

    def closed(self, timeout: float = 10.0) -> bool:
        """Read until the server closes the connection (True) or `timeout` passes."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(1 << 20):
                pass
        except (TimeoutError, socket.timeout):
            return False
        except OSError:  # reset
            return True
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def raw_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    """One frame as bytes, whatever its stream (hyperframe refuses some)."""
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags])
            + stream.to_bytes(4, "big") + payload)


def rapid_reset_bytes(authority: str, streams: int) -> bytes:
    """A connection's worth of rapid reset, as fast as bytes go: the preface, then
    `streams` times a ModelInfer call (HEADERS, its message) reset at once (RST_STREAM
    CANCEL). The header block uses no HPACK table, so one block serves every stream."""
    block = hpack.Encoder().encode(
        [hpack.NeverIndexedHeaderTuple(k, v) for k, v in headers(INFER, authority)])
    message = grpc_message(identity_request())
    out = [PREFACE, SettingsFrame(0).serialize()]
    for stream in range(1, 2 * streams, 2):
        out.append(raw_frame(0x1, 0x4, stream, block) + raw_frame(0x0, 0x1, stream, message)
                   + raw_frame(0x3, 0x0, stream, (0x8).to_bytes(4, "big")))
    return b"".join(out)


def status_of(events: list, stream: int) -> str | None:
    """The grpc-status the server ended `stream` with, if its trailers came."""
    for event in events:
        if isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived)) \
                and event.stream_id == stream:
            found = dict(event.headers).get("grpc-status")
            if found is not None:
                return found
    return None


def message_of(events: list, stream: int) -> str:
    for event in events:
        if isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived)) \
                and event.stream_id == stream:
            found = dict(event.headers).get("grpc-message")
            if found is not None:
                return found
    return ""


def frames(kind: str, count: int, stream: int = 0) -> bytes:
    """`count` frames of one kind, serialized once and repeated (floods)."""
    if kind == "ping":
        one = PingFrame(0, opaque_data=b"12345678").serialize()
    elif kind == "settings":
        one = SettingsFrame(0, settings={h2.settings.SettingCodes.MAX_FRAME_SIZE: 16384}
                            ).serialize()
    elif kind == "empty-data":
        one = DataFrame(stream, data=b"").serialize()
    else:
        raise ValueError(kind)
    return one * count


def header_block_frames(stream: int, block: bytes, piece: int) -> Iterator[bytes]:
    """A header block split into HEADERS and CONTINUATION frames of `piece` bytes, the
    last one never ending it (no END_HEADERS): a half-sent header block."""
    first = HeadersFrame(stream, data=block[:piece])
    yield first.serialize()
    for at in range(piece, len(block), piece):
        yield ContinuationFrame(stream, data=block[at:at + piece]).serialize()
