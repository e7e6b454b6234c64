"""The zttp gRPC transport's timeouts, grpc-timeout, and its connection cap, against a
real pbserve over raw HTTP/2 frames: an idle connection, a half-sent header block, a
frame or a request message that stops arriving, a client that reads nothing of its
answers, a call past its deadline (the client never resetting it), more connections
than the file descriptor limit allows."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import time
from pathlib import Path

import h2.errors
import h2.events
import h2.settings
import pytest
from hyperframe.frame import DataFrame, HeadersFrame
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from h2_raw import (
    INFER,
    infer_once,
    STREAM_INFER,
    RawClient,
    grpc_message,
    headers,
    identity_request,
    message_of,
    sleepy_request,
    status_of,
)
from pbserve.testing import running_server
from polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES, TEST_MODELS = ROOT / "models" / "examples", ROOT / "tests" / "models"
TIMEOUT = 1.0  # every timeout of the `timed` server, in seconds
MODELS = ["--model-control-mode", "explicit", "--load-model", "identity"]


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    log = tmp_path_factory.mktemp("grpc-limits") / "server.log"
    with running_server(EXAMPLES, TEST_MODELS, log_path=log, args=[
            *MODELS, "--load-model", "cancel_probe", "--load-model", "sleepy",
            *(f"--grpc-{kind}-timeout-secs={TIMEOUT}"
              for kind in ("header", "body", "idle", "send"))]) as srv:
        yield srv


def goaway(client: RawClient) -> h2.events.ConnectionTerminated:
    events = client.until(lambda e: isinstance(e, h2.events.ConnectionTerminated))
    return events[-1] if isinstance(events[-1], h2.events.ConnectionTerminated) else \
        next(e for e in events if isinstance(e, h2.events.ConnectionTerminated))


# --- connection timeouts --------------------------------------------------------------

def test_an_idle_connection_gets_a_graceful_goaway_and_is_closed(timed):
    client = RawClient(timed.grpc_url)
    try:
        stream = client.call(INFER, identity_request())
        events = client.until(lambda e: isinstance(e, h2.events.StreamEnded))
        assert status_of(events, stream) == "0"
        assert goaway(client).error_code == h2.errors.ErrorCodes.NO_ERROR
        assert client.closed()
    finally:
        client.close()


def test_a_connection_that_never_sends_is_closed(timed):
    with socket.create_connection(("127.0.0.1", int(timed.grpc_url.rsplit(":")[1])),
                                  timeout=10) as sock:
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(65536):
                pass  # the server's preface, its GOAWAY, then EOF


def test_a_half_sent_header_block_ends_the_connection(timed):
    """HEADERS without END_HEADERS, and no CONTINUATION: GOAWAY ENHANCE_YOUR_CALM."""
    client = RawClient(timed.grpc_url)
    try:
        client.ready()
        import hpack
        block = hpack.Encoder().encode(headers(INFER, client.authority))
        client.send_raw(HeadersFrame(1, data=block[:10]).serialize())
        assert goaway(client).error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert client.closed()
        assert "header block not received within 1 s" in timed.log_text()
    finally:
        client.close()
    infer_once(timed.grpc_url)


def test_a_frame_that_stops_arriving_ends_the_connection(timed):
    client = RawClient(timed.grpc_url)
    try:
        client.ready()
        stream = client.call(INFER, None, end=False)
        frame = DataFrame(stream, data=grpc_message(identity_request())).serialize()
        client.send_raw(frame[:20])  # the frame's header and a few of its bytes
        assert goaway(client).error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert client.closed()
    finally:
        client.close()


@pytest.mark.parametrize("cut", ["message", "end_stream"])
def test_a_stalled_request_message_ends_its_call(timed, cut):
    """A message whose rest never comes (or a unary request never ended) is CANCELLED;
    the connection goes on serving."""
    client = RawClient(timed.grpc_url)
    try:
        client.ready()
        message = grpc_message(identity_request())
        stream = client.call(INFER, None, end=False)
        client.conn.send_data(stream, message[:12] if cut == "message" else message)
        client.flush()
        events = client.until(lambda e: isinstance(e, h2.events.StreamReset)
                              and e.stream_id == stream)
        assert status_of(events, stream) == str(grpc_code("CANCELLED"))
        assert "no request message data received for 1 s" in message_of(events, stream)
        again = client.call(INFER, identity_request())
        events = client.until(lambda e: isinstance(e, h2.events.StreamEnded)
                              and e.stream_id == again)
        assert status_of(events, again) == "0"
    finally:
        client.close()


def test_a_stream_that_pauses_between_messages_is_not_cut(timed):
    """ModelStreamInfer may wait as long as it likes between whole messages."""
    client = RawClient(timed.grpc_url)
    try:
        client.ready()
        stream = client.call(STREAM_INFER, identity_request(), end=False)
        client.until(lambda e: isinstance(e, h2.events.DataReceived))
        time.sleep(2.5 * TIMEOUT)  # longer than the body timeout (and the idle one)
        client.conn.send_data(stream, grpc_message(identity_request()), end_stream=True)
        client.flush()
        events = client.until(lambda e: isinstance(e, h2.events.StreamEnded))
        assert status_of(events, stream) == "0"
    finally:
        client.close()


@pytest.mark.parametrize("how", ["socket", "window"])
def test_a_client_that_takes_no_answer_is_cut_off(timed, how):
    """Answers of 4 MiB to a client that reads nothing (a full socket) or opens no
    window: the connection is closed once the send timeout passes."""
    before = timed.log_text().count("took no response data")
    settings = {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0} if how == "window" else None
    client = RawClient(timed.grpc_url, settings=settings, rcvbuf=4096)
    try:
        client.ready()
        for _ in range(4):
            client.call(INFER, identity_request(256 * 1024))
        if how == "window":  # reads every frame, grants nothing
            with contextlib.suppress(AssertionError):
                client.until(lambda e: False, timeout=5 * TIMEOUT)
        wait_for(lambda: timed.log_text().count("took no response data") > before,
                 "the send timeout")
        assert client.closed()
    finally:
        client.close()
    infer_once(timed.grpc_url)


# --- grpc-timeout ---------------------------------------------------------------------

def grpc_code(name: str) -> int:
    import grpc
    return getattr(grpc.StatusCode, name).value[0]


def test_a_call_past_its_grpc_timeout_is_cancelled_by_the_server(timed, tmp_path):
    """The client sends grpc-timeout and never resets the stream: the server answers
    DEADLINE_EXCEEDED when it passes, and the model sees its request cancelled."""
    marker = tmp_path / "seen.json"
    request = pb.ModelInferRequest(model_name="cancel_probe")
    request.inputs.add(name="MARKER", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(len(str(marker)).to_bytes(4, "little")
                                      + str(marker).encode())
    client = RawClient(timed.grpc_url)
    try:
        client.ready()
        stream = client.call(INFER, request.SerializeToString(),
                             extra=[("grpc-timeout", "300m")])
        events = client.until(lambda e: isinstance(e, h2.events.StreamEnded)
                              and e.stream_id == stream)
        assert status_of(events, stream) == str(grpc_code("DEADLINE_EXCEEDED"))
        assert message_of(events, stream) == "Deadline Exceeded"
        wait_for(marker.exists, "the model to see the cancellation")
        assert json.loads(marker.read_text())["cancelled"] is True
    finally:
        client.close()


def test_a_stream_past_its_grpc_timeout_ends_deadline_exceeded(timed):
    client = RawClient(timed.grpc_url)
    try:
        client.ready()
        stream = client.call(STREAM_INFER, sleepy_request(5000), end=False,
                             extra=[("grpc-timeout", "200m")])
        events = client.until(lambda e: isinstance(e, h2.events.StreamEnded)
                              and e.stream_id == stream)
        assert status_of(events, stream) == str(grpc_code("DEADLINE_EXCEEDED"))
    finally:
        client.close()


# --- the connection cap ---------------------------------------------------------------

FD_LIMIT = 256


@pytest.fixture(scope="module")
def fd_limited(tmp_path_factory):
    """A server whose RLIMIT_NOFILE is FD_LIMIT: its default cap is 192 connections."""
    log = tmp_path_factory.mktemp("grpc-fd-limit") / "server.log"
    # Set in the server's process alone, which then execs pbserve: this process may hold
    # more than FD_LIMIT descriptors itself, late in a suite.
    limit = [sys.executable, "-c", "import os, resource, sys; "
             f"resource.setrlimit(resource.RLIMIT_NOFILE, ({FD_LIMIT}, "
             "resource.getrlimit(resource.RLIMIT_NOFILE)[1])); "
             "os.execv(sys.argv[1], sys.argv[1:])"]
    server = running_server(EXAMPLES, log_path=log, args=[*MODELS], launcher=limit)
    srv = server.__enter__()
    try:
        yield srv
    finally:
        server.__exit__(None, None, None)


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def test_more_idle_connections_than_the_fd_limit_lock_no_client_out(fd_limited):
    """Past the cap, the connection idle the longest makes room (a graceful GOAWAY)."""
    crowd = []
    try:
        for _ in range(int(FD_LIMIT * 1.5)):
            sock = socket.create_connection(
                ("127.0.0.1", int(fd_limited.grpc_url.rsplit(":")[1])), timeout=10)
            crowd.append(sock)
        infer_once(fd_limited.grpc_url)
        assert open_fds(fd_limited.pid) < FD_LIMIT
    finally:
        for sock in crowd:
            sock.close()


def test_past_the_cap_with_every_connection_busy_a_new_one_is_refused(fd_limited):
    busy = []
    try:
        for _ in range(FD_LIMIT):  # more than the cap, each with a call in progress
            try:
                client = RawClient(fd_limited.grpc_url)
                client.call(INFER, None, end=False)
            except OSError:
                break
            busy.append(client)
        wait_for(lambda: "--grpc-max-connections" in fd_limited.log_text(),
                 "a refusal")
        extra = RawClient(fd_limited.grpc_url)
        try:  # GOAWAY ENHANCE_YOUR_CALM, and closed at once (its preface unread: a reset)
            with contextlib.suppress(ConnectionResetError):
                assert goaway(extra).error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        finally:
            extra.close()
        assert open_fds(fd_limited.pid) < FD_LIMIT
    finally:
        for client in busy:
            client.close()
    wait_for(lambda: _served(fd_limited.grpc_url), "the server to serve again")


def _served(url: str) -> bool:
    try:
        infer_once(url)
        return True
    except InferenceServerException:
        return False
