"""The gRPC port under HTTP/2 attacks, with raw frames over a real socket against a real
pbserve: rapid reset (CVE-2023-44487), CONTINUATION flood, PING and SETTINGS floods from
a client that reads nothing, zero window, HPACK bomb, empty DATA frames, thousands of
unfinished streams. Each checks that another client is served while the attack runs and
that the server's memory stays bounded; the floods, that the attacker is cut off."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import h2.events
import h2.exceptions
import h2.settings
import hpack
import pytest
from hyperframe.frame import HeadersFrame

from tritonclient.utils import InferenceServerException

from h2_raw import (
    INFER,
    infer_once,
    RawClient,
    frames,
    header_block_frames,
    headers,
    identity_request,
    rapid_reset_bytes,
    rss_kib,
)
from pbserve.testing import running_server
from polling import wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"
GROWTH_KIB = 48 * 1024  # what an attack may add to the server's RSS (grpc-core: 250 MiB)


def _server(tmp_path_factory, transport: str):
    log = tmp_path_factory.mktemp(f"attacks-{transport}") / "server.log"
    return running_server(EXAMPLES, log_path=log, args=[
        "--grpc-transport", transport, "--model-control-mode", "explicit",
        "--load-model", "identity"])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with _server(tmp_path_factory, "zttp") as srv:
        yield srv


def served(url: str) -> bool:
    try:
        infer_once(url)
        return True
    except InferenceServerException:
        return False


def under_attack(server, attack: Callable[[], None]) -> None:
    """Run `attack` in a thread; meanwhile another client must be served, at least once
    and every time it asks; then the server's RSS must not have grown past GROWTH_KIB."""
    infer_once(server.grpc_url)  # warm: the first call's allocations are not the attack's
    before = rss_kib(server.pid)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            attack()
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    served = 0
    while thread.is_alive() or not served:
        infer_once(server.grpc_url)
        served += 1
    thread.join()
    if failure:
        raise failure[0]
    grown = rss_kib(server.pid) - before
    assert grown < GROWTH_KIB, f"the server's RSS grew by {grown} KiB"
    infer_once(server.grpc_url)


def rapid_reset(url: str, connections: int = 4, streams: int = 20_000) -> None:
    """Calls opened and reset at once, 20,000 per connection, as fast as the bytes go
    (zttp's flood check cuts a connection off early: the next one starts)."""
    host, port = url.rsplit(":", 1)
    attack = rapid_reset_bytes(url, streams)
    for _ in range(connections):
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            with contextlib.suppress(OSError):
                sock.sendall(attack)


def test_rapid_reset(server):
    under_attack(server, lambda: rapid_reset(server.grpc_url))


def flood_until_cut_off(url: str, chunk: bytes, most_bytes: int) -> None:
    """Send `chunk` again and again, reading nothing back, until the server closes the
    connection; AssertionError if it took `most_bytes` without closing it."""
    client = RawClient(url, rcvbuf=4096)
    sent = 0
    try:
        while sent < most_bytes:
            try:
                client.send_raw(chunk)
            except (BrokenPipeError, ConnectionResetError):
                return
            except (TimeoutError, socket.timeout):
                raise AssertionError(f"the server stopped reading after {sent} bytes "
                                     f"and did not close the connection") from None
            sent += len(chunk)
        raise AssertionError(f"{sent} bytes of a flood taken without closing")
    finally:
        client.close()


@pytest.mark.parametrize("kind", ["ping", "settings"])
def test_a_control_frame_flood_from_a_client_that_never_reads_is_cut_off(server, kind):
    """Each PING and SETTINGS is answered; with the answers piling up unread, the
    server ends the connection (GOAWAY ENHANCE_YOUR_CALM) instead of queueing more."""
    chunk = frames(kind, 4096)
    under_attack(server, lambda: flood_until_cut_off(server.grpc_url, chunk, 512 << 20))


def test_continuation_flood(server):
    """A header block that never ends, sent as endless CONTINUATION frames."""
    def attack() -> None:
        client = RawClient(server.grpc_url)
        try:
            block = hpack.Encoder().encode(headers(INFER, client.authority))
            junk = block + b"\x00\x03abc\x03def" * (256 << 10)  # ~2.8 MiB of fields
            try:
                for frame in header_block_frames(1, junk, 16384):
                    client.send_raw(frame)
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert client.closed(), "the connection stays open"
        finally:
            client.close()
    under_attack(server, attack)


def test_hpack_bomb(server):
    """A 4 KiB header in the dynamic table, then a block referencing it 16,000 times:
    64 MiB once decoded from 16 KB sent. The stream (or the connection) is refused."""
    def attack() -> None:
        for _ in range(5):
            client = RawClient(server.grpc_url)
            try:
                encoder = hpack.Encoder()
                first = encoder.encode(headers(INFER, client.authority)
                                       + [("x-big", "a" * 4000)])
                client.send_raw(HeadersFrame(1, data=first, flags=["END_HEADERS"])
                                .serialize())
                again = encoder.encode(headers(INFER, client.authority))
                bomb = again + encoder.encode([("x-big", "a" * 4000)]) * 16000
                try:
                    for frame in header_block_frames(3, bomb, 16384):
                        client.send_raw(frame)
                    client.send_raw(HeadersFrame(3, data=b"", flags=["END_HEADERS"])
                                    .serialize()[:0])
                except (BrokenPipeError, ConnectionResetError):
                    pass
            finally:
                client.close()
    under_attack(server, attack)


def test_empty_data_frames(server):
    """A call's stream fed with 400,000 empty DATA frames."""
    def attack() -> None:
        client = RawClient(server.grpc_url, rcvbuf=4096)
        try:
            stream = client.call(INFER, None, end=False)
            chunk = frames("empty-data", 8192, stream)
            for _ in range(50):  # 400,000 frames, 3.6 MB
                try:
                    client.send_raw(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    return
        finally:
            client.close()
    under_attack(server, attack)


def test_zero_window(server):
    """A client that opens no window (SETTINGS_INITIAL_WINDOW_SIZE 0) and makes calls
    with large answers: they wait, parked, and other clients are served."""
    def attack() -> None:
        settings = {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}
        client = RawClient(server.grpc_url, settings=settings)
        try:
            client.ready()
            for _ in range(64):  # 64 answers of 64 KiB each
                client.call(INFER, identity_request(16 * 1024))
            client.until(lambda e: isinstance(e, h2.events.ResponseReceived))
            infer_once(server.grpc_url)
        finally:
            client.close()
    under_attack(server, attack)


def test_thousands_of_unfinished_streams(server):
    """1,000 calls opened, their requests never sent (HEADERS without END_STREAM): past
    zttp's bound on concurrent streams the rest are refused (REFUSED_STREAM)."""
    def attack() -> None:
        client = RawClient(server.grpc_url)
        try:  # sent before reading the server's SETTINGS (MAX_CONCURRENT_STREAMS 128)
            for _ in range(1000):
                client.call(INFER, None, end=False)
            refused: set[int] = set()
            last = client.conn.highest_outbound_stream_id
            client.until(lambda e: isinstance(e, h2.events.StreamReset)
                         and (refused.add(e.stream_id) or e.stream_id == last))
            assert len(refused) > 800, f"{len(refused)} streams refused"
        finally:
            client.close()
    under_attack(server, attack)


def test_grpcio_transport_does_not_fall_over_under_rapid_reset(tmp_path_factory):
    """--grpc-transport grpcio (grpc-core, with a bound on concurrent streams): after a
    sustained rapid reset the server is up, serves, and its memory is bounded. Open:
    during the attack other clients' calls may fail (CANCELLED; docs/grpc_limits.md)."""
    with _server(tmp_path_factory, "grpcio") as srv:
        infer_once(srv.grpc_url)
        before = rss_kib(srv.pid)
        rapid_reset(srv.grpc_url, connections=60)
        assert srv.proc.poll() is None, "the server exited"
        wait_for(lambda: served(srv.grpc_url), "the server to serve again")
        assert rss_kib(srv.pid) - before < GROWTH_KIB
