"""Requests a broken or hostile client sends get a 4xx / INVALID_ARGUMENT (shared memory
that runs out: 507 / RESOURCE_EXHAUSTED) with at most one log line each, never a
traceback; the log does not grow with the number of such requests; the server serves on.
Against a real pbserve, the way clients send them."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from client_inputs import grpc_input, http_input
from pbserve.server.error_log import BURST, ErrorLog
from pbserve.server.grpc.codec import status_message
from pbserve.testing import running_server

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"
SERVICE = "/inference.GRPCInferenceService/"
IDENTITY = ["--model-control-mode", "explicit", "--load-model", "identity"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("errors") / "server.log"
    with running_server(EXAMPLES, log_path=log, args=IDENTITY) as srv:
        yield srv


def post(server, path: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def assert_serves(server) -> None:
    a = np.arange(4, dtype=np.int32)
    assert (server.http_client().infer("identity", [http_input("INPUT_INT32", a)])
            .as_numpy("OUTPUT_INT32") == a).all()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert (client.infer("identity", [grpc_input("INPUT_INT32", a)])
            .as_numpy("OUTPUT_INT32") == a).all()
    client.close()


def lines_with(server, needle: str) -> list[str]:
    return [line for line in server.log_text().splitlines() if needle in line]


def test_json_nested_past_the_parser_is_400_with_one_line(server):
    deep = b'{"inputs": ' + b"[" * 1500 + b"]" * 1500 + b"}"
    assert post(server, "/v2/models/identity/infer", deep) == (
        400, {"error": "failed to parse the request JSON buffer: nested too deeply"})
    assert len(lines_with(server, "nested too deeply")) == 1
    assert "Traceback" not in server.log_text()
    assert_serves(server)


def test_a_load_config_nested_past_the_parser_is_400(server):
    config = '{"parameters": ' + "[" * 1500 + "]" * 1500 + "}"
    files = {"file:1/model.py": base64.b64encode(b"pass").decode()}
    status, body = post(server, "/v2/repository/models/deep/load",
                        json.dumps({"parameters": {"config": config, **files}}).encode())
    assert status == 400, body
    assert "nested too deeply" in body["error"]
    assert "Traceback" not in server.log_text()


def load_parameters(name: str) -> dict:
    return {"config": json.dumps({"backend": "python"}),
            name: base64.b64encode(b"pass").decode()}


def test_a_nul_in_a_file_name_is_400_over_http(server):
    body = json.dumps({"parameters": load_parameters("file:1/mo\0del.py")}).encode()
    status, reply = post(server, "/v2/repository/models/nul/load", body)
    assert status == 400, reply
    assert "a path may not contain a NUL character" in reply["error"]


def test_a_nul_in_a_file_name_is_invalid_argument_over_grpc(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as info:
        client.load_model("nul", config=json.dumps({"backend": "python"}),
                          files={"file:1/mo\0del.py": b"pass"})
    client.close()
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT", info.value
    assert "NUL character" in info.value.message()
    assert "Traceback" not in server.log_text()


def valid_infer_request() -> bytes:
    request = pb.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT_INT32", datatype="INT32", shape=[4])
    request.raw_input_contents.append(np.arange(4, dtype=np.int32).tobytes())
    return request.SerializeToString()


GARBAGE = {
    "random": bytes(np.random.default_rng(5).integers(0, 256, 300, dtype=np.uint8)),
    "truncated": valid_infer_request()[:-7],
    "bad-varint": b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_undecodable_protobuf_is_invalid_argument_without_a_traceback(server, name):
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(SERVICE + "ModelInfer")
        with pytest.raises(grpc.RpcError) as info:
            call(GARBAGE[name], timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
    assert "failed to parse the inference.ModelInferRequest message" in info.value.details()
    assert "Traceback" not in server.log_text()
    assert_serves(server)


def test_a_garbage_frame_ends_a_stream_with_an_error_status(server):
    good = valid_infer_request()
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.stream_stream(SERVICE + "ModelStreamInfer")
        responses = call(iter([good, GARBAGE["truncated"], good]), timeout=10)
        received = []
        with pytest.raises(grpc.RpcError) as info:
            for response in responses:
                received.append(response)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
    assert len(received) <= 1  # the request before the garbage may have been answered
    assert "Traceback" not in server.log_text()
    assert_serves(server)


def test_an_error_message_past_the_metadata_limit_is_cut_not_resource_exhausted(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata("\u00e9" * 20000)  # 40 KB of UTF-8, 120 KB encoded
    client.close()
    assert info.value.status() == "StatusCode.NOT_FOUND", info.value
    assert "more bytes cut)" in info.value.message()


def test_repeated_malformed_requests_are_logged_a_bounded_number_of_times(server):
    before = len(lines_with(server, "failed to parse the request JSON buffer"))
    for _ in range(40):
        assert post(server, "/v2/models/identity/infer", b"{not json")[0] == 400
    logged = len(lines_with(server, "failed to parse the request JSON buffer")) - before
    assert 1 <= logged <= BURST, logged
    assert_serves(server)


def test_error_log_lets_a_burst_through_then_one_per_interval_with_a_count():
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("test_error_paths.rate")
    logger.addHandler(Collect())
    logger.propagate = False
    now = [0.0]
    errors = ErrorLog(logger, burst=3, interval_s=10.0, clock=lambda: now[0])
    for _ in range(10):
        errors.line(logging.ERROR, "a", "kind a")
    errors.line(logging.ERROR, "b", "kind b")  # another kind has its own share
    assert records == ["kind a"] * 3 + ["kind b"]
    now[0] = 10.0
    for _ in range(5):
        errors.line(logging.ERROR, "a", "kind a")
    assert records[4:] == ["kind a (7 more like it not logged)"]


@pytest.mark.parametrize("message", ["short", "x" * 1365, "\u00e9" * 5000, "%" * 3000,
                                     "a\U0001f600" * 3000])
def test_status_messages_fit_the_trailer_once_percent_encoded(message):
    cut = status_message(message)
    encoded = sum(1 if 0x20 <= b <= 0x7E and b != 0x25 else 3 for b in cut.encode())
    assert encoded <= 4096
    assert cut == message or (cut.endswith("bytes cut)") and message.startswith(cut[:100]))


# --- shared memory that runs out ------------------------------------------------------

SHM_MIB = 32
UNSHARE = ["unshare", "--mount"] + ([] if os.geteuid() == 0 else
                                   ["--user", "--map-root-user"])
MOUNT = f"mount -t tmpfs -o size={SHM_MIB}m tmpfs /dev/shm"


def small_shm_wrapper() -> list[str]:
    """A command running the server with its own /dev/shm of SHM_MIB MiB; skips the
    test where this system lets no one make a mount namespace."""
    probe = subprocess.run([*UNSHARE, "sh", "-c", MOUNT], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private /dev/shm here: {probe.stderr.decode().strip()}")
    return [*UNSHARE, "sh", "-c", MOUNT + ' && exec "$@"', "sh"]


def test_shared_memory_that_runs_out_is_507_and_resource_exhausted(tmp_path):
    big = np.zeros(48 << 20, np.uint8)  # more than the whole /dev/shm
    with running_server(EXAMPLES, log_path=tmp_path / "server.log", args=IDENTITY,
                        launcher=small_shm_wrapper()) as srv:
        with pytest.raises(InferenceServerException) as http_error:
            srv.http_client().infer("identity", [http_input("INPUT_UINT8", big)])
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        with pytest.raises(InferenceServerException) as grpc_error:
            client.infer("identity", [grpc_input("INPUT_UINT8", big)])
        client.close()
        assert_serves(srv)
        log = srv.log_text()
    assert http_error.value.status() == "507", http_error.value
    assert grpc_error.value.status() == "StatusCode.RESOURCE_EXHAUSTED", grpc_error.value
    for error in (http_error.value, grpc_error.value):
        # Triton's words first (clients match them), then the size that did not fit
        assert error.message().startswith("Failed to increase the shared memory pool size")
        assert f"cannot allocate {48 << 20} bytes of shared memory" in error.message()
    assert "Traceback" not in log
    assert len([line for line in log.splitlines() if "cannot allocate" in line]) == 2
