"""Back-pressure on ModelStreamInfer (zttp transport): a client that sends 100,000
requests on one stream to a model that takes 10 ms each is held by flow control (the
server stops reading; its socket and the client's fill), and the server never holds more
than --grpc-max-pending-per-connection (or, over all connections, --grpc-max-pending) of
them, while other clients are served."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from hyperframe.frame import DataFrame

from h2_raw import STREAM_INFER, RawClient, grpc_message, infer_once, rss_kib, sleepy_request
from pbserve.testing import running_server
from polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
PER_CONNECTION, PER_SERVER = 16, 24
REQUESTS = 100_000
PER_CHUNK = 2000


def pending(server) -> int:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as reply:
        text = reply.read().decode()
    found = re.search(r'nv_inference_pending_request_count{model="sleepy",version="1"} (\d+)',
                      text)
    return int(found.group(1)) if found else 0


class Flood(threading.Thread):
    """REQUESTS sleepy(10 ms) requests on one ModelStreamInfer stream, as fast as the
    socket takes them; reads nothing back."""

    def __init__(self, url: str, id_bytes: int = 0) -> None:
        super().__init__(daemon=True)
        self.id_bytes = id_bytes  # each request's id: past 4 KiB, zttp is bypassed
        self.client = RawClient(url, rcvbuf=4096)
        self.client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        self.client.ready()
        self.stream = self.client.call(STREAM_INFER, None, end=False)
        self.sent = 0
        self.stop = False
        self.error: OSError | None = None

    def run(self) -> None:
        message = sleepy_request(10, "x" * self.id_bytes)
        frame = DataFrame(self.stream, data=grpc_message(message)).serialize()
        chunk = frame * PER_CHUNK
        self.client.sock.settimeout(60)
        try:
            while self.sent < REQUESTS and not self.stop:
                self.client.sock.sendall(chunk)
                self.sent += PER_CHUNK
        except OSError as exc:
            self.error = exc  # closed by the test, or by the server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("backpressure") / "server.log"
    with running_server(ROOT / "models" / "examples", ROOT / "tests" / "models",
                        log_path=log, args=[
                            "--model-control-mode", "explicit", "--load-model", "sleepy",
                            "--load-model", "identity",
                            "--grpc-max-pending-per-connection", str(PER_CONNECTION),
                            "--grpc-max-pending", str(PER_SERVER),
                            # shorter than the test holds the floods: a pause of the
                            # server's making is no stall of the client's
                            "--grpc-body-timeout-secs", "1",
                            "--grpc-header-timeout-secs", "1"]) as srv:
        yield srv


@pytest.mark.parametrize("floods, bound, id_bytes", [
    (1, PER_CONNECTION, 0), (3, PER_SERVER, 0),
    (1, PER_CONNECTION, 8000)])  # frames of 8 KiB: their payloads go past zttp
def test_a_stream_faster_than_its_model_is_held_by_flow_control(server, floods, bound,
                                                                 id_bytes):
    """One flood: held at the connection's bound; three: at the server's (less than
    three connections' worth)."""
    srv = server
    wait_for(lambda: pending(srv) == 0, "the last test's requests to end")
    infer_once(srv.grpc_url)
    before = rss_kib(srv.pid)
    threads = [Flood(srv.grpc_url, id_bytes) for _ in range(floods)]
    for thread in threads:
        thread.start()
    try:
        most = 0

        def held() -> bool:
            """The floods send nothing more for a while (none has sent all)."""
            nonlocal most
            sent = [thread.sent for thread in threads]
            most = max(most, pending(srv))
            time.sleep(0.3)
            most = max(most, pending(srv))
            return [thread.sent for thread in threads] == sent and max(sent) < REQUESTS

        wait_for(held, "the flood to be held", timeout_s=60)
        time.sleep(1.5)  # past the body timeout, still held
        for _ in range(5):
            most = max(most, pending(srv))
        infer_once(srv.grpc_url)  # another client, served meanwhile
        sent = sum(thread.sent for thread in threads)
        assert not any(thread.error for thread in threads), "a held flood was cut off"
        assert "no frame data received" not in srv.log_text()
        assert sent < floods * REQUESTS
        assert most <= bound, f"{most} requests pending (bound {bound}), {sent} sent"
        assert rss_kib(srv.pid) - before < 64 * 1024
    finally:
        for thread in threads:
            thread.stop = True
            with contextlib.suppress(OSError):  # wakes its blocked sendall
                thread.client.sock.shutdown(socket.SHUT_RDWR)
            thread.client.close()
            thread.join(10)
    infer_once(srv.grpc_url)
