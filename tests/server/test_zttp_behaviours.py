"""What pbserve's gRPC transport relies on in zttp and zttp does not document
(window.py, frames.py). zttp is an alpha release, pinned in pyproject.toml; if a release
changes one of these, its test fails naming the behaviour, and window.py needs another
way to offer its larger receive window (frames.py, another way to take large payloads)."""

from __future__ import annotations

import hpack
import zttp
from hyperframe.frame import DataFrame, HeadersFrame, SettingsFrame, WindowUpdateFrame

from h2_raw import INFER, PREFACE, headers
from pbserve.server.grpc.h2.window import RECEIVE_WINDOW, window_frames

_DEFAULT_WINDOW = 65_535


def a_server() -> zttp.H2Connection:
    """A zttp server that read a client's preface and empty SETTINGS."""
    server = zttp.Connection(zttp.SERVER, zttp.HTTP2)
    server.initiate_connection()
    server.data_to_send()
    server.receive_data(PREFACE + SettingsFrame(0).serialize())
    while server.next_event() is not zttp.NEED_DATA:
        pass
    server.data_to_send()  # its ACK of the client's SETTINGS
    return server


def events(server: zttp.H2Connection) -> list:
    found = []
    while (event := server.next_event()) is not zttp.NEED_DATA:
        found.append(event)
    return found


def request_headers(stream: int) -> bytes:
    block = hpack.Encoder().encode(headers(INFER, "x"))
    return HeadersFrame(stream, data=block, flags=["END_HEADERS"]).serialize()


def test_zttp_takes_data_beyond_the_window_it_advertised():
    """Behaviour 1: zttp advertises 64 KiB and checks no receive window of its own, so
    a client told of a larger one (window.py's frames, sent outside zttp) may send
    more. 160 KiB on one stream, with no credit from zttp, all arrive."""
    server = a_server()
    server.receive_data(request_headers(1))
    body = b"x" * 16384
    try:
        server.receive_data(DataFrame(1, data=body).serialize() * 10)
        received = sum(len(e.data) for e in events(server)
                       if isinstance(e, zttp.Data))
    except zttp.ProtocolError as exc:
        raise AssertionError(f"zttp no longer takes DATA beyond the window it "
                             f"advertised ({exc}): window.py's larger window breaks") from None
    assert received == 10 * len(body) > _DEFAULT_WINDOW, \
        "zttp no longer takes DATA beyond the window it advertised"


def test_zttp_credits_the_data_it_reads_at_once():
    """Behaviour 1, its other half: zttp's WINDOW_UPDATEs give back what it read, on
    the stream and the connection, as soon as half its own 64 KiB window is used, with
    no regard to the window the client was told: window.py's windows stay full."""
    server = a_server()
    server.receive_data(request_headers(1))
    sent = 10 * 16384
    server.receive_data(DataFrame(1, data=b"x" * 16384).serialize() * 10)
    events(server)
    credit: dict[int, int] = {}
    out = server.data_to_send()
    while out:
        length, kind = int.from_bytes(out[:3], "big"), out[3]
        stream = int.from_bytes(out[5:9], "big") & 0x7FFFFFFF
        if kind == WindowUpdateFrame.type:
            credit[stream] = credit.get(stream, 0) + int.from_bytes(out[9:13], "big")
        out = out[9 + length:]
    for stream in (0, 1):
        assert 0 <= sent - credit.get(stream, 0) <= _DEFAULT_WINDOW // 2, \
            f"zttp no longer credits the DATA it reads at once: {credit} of {sent} bytes"


def test_zttp_takes_an_empty_data_frame_silently_and_ends_its_stream_on_it():
    """Behaviour 3 (frames.py FrameScanner hands zttp large DATA frames emptied): an
    empty DATA frame makes no event, no credit and no error, and one with END_STREAM
    ends its message."""
    server = a_server()
    server.receive_data(request_headers(1))
    events(server)
    server.data_to_send()
    server.receive_data(DataFrame(1, data=b"").serialize() * 100)
    assert events(server) == [], "zttp makes events of empty DATA frames"
    assert server.data_to_send() == b"", "zttp answers empty DATA frames"
    server.receive_data(DataFrame(1, data=b"", flags=["END_STREAM"]).serialize())
    assert [type(e) for e in events(server)] == [zttp.EndOfMessage], \
        "zttp no longer ends a message on an empty DATA frame with END_STREAM"


def test_zttp_ignores_the_ack_of_a_second_settings():
    """Behaviour 2: the client ACKs zttp's SETTINGS and window.py's second one; zttp
    takes the second ACK without an error or an event, and serves on."""
    server = zttp.Connection(zttp.SERVER, zttp.HTTP2)
    server.initiate_connection()
    server.data_to_send()
    ack = SettingsFrame(0, flags=["ACK"]).serialize()
    try:
        server.receive_data(PREFACE + SettingsFrame(0).serialize() + ack + ack)
        seen = [e for e in events(server) if not isinstance(e, zttp.Settings)]
        server.receive_data(request_headers(1))
        requests = [e for e in events(server) if isinstance(e, zttp.Request)]
    except zttp.ProtocolError as exc:
        raise AssertionError(f"zttp no longer ignores the ACK of a SETTINGS it did not "
                             f"send ({exc}): window.py's second SETTINGS breaks") from None
    assert not seen, f"zttp now reports the second SETTINGS ACK: {seen}"
    assert len(requests) == 1


def test_a_clients_view_of_the_window_frames_after_zttps_preface():
    """The two together, as a client sees them: zttp's preface then window.py's frames
    give RECEIVE_WINDOW on the connection and on each new stream."""
    server = zttp.Connection(zttp.SERVER, zttp.HTTP2)
    server.initiate_connection()
    client = zttp.Connection(zttp.CLIENT, zttp.HTTP2)
    client.initiate_connection()
    client.receive_data(server.data_to_send() + window_frames())
    while client.next_event() is not zttp.NEED_DATA:
        pass
    stream = client.send_request(b"POST", INFER.encode(), b"HTTP/2",
                                 [(b"content-type", b"application/grpc")])
    assert client.send_window == stream.send_window == RECEIVE_WINDOW
