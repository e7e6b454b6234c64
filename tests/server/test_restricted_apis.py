"""--http-restricted-api and --grpc-restricted-protocol against a real pbserve: a request
to a restricted group needs its header (gRPC: `triton-grpc-protocol-<key>` metadata) with
the right value, and gets Triton's refusal without it; other groups stay open."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from client_inputs import grpc_input, http_input
from pbserve.testing import free_ports, running_server

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"
ADMIN = {"admin-key": "s3cret"}
INFER = {"infer-key": "go"}
GRPC_ADMIN = {"triton-grpc-protocol-admin-key": "s3cret"}
GRPC_INFER = {"triton-grpc-protocol-infer-key": "go"}


@pytest.fixture(scope="module")
def server():
    with running_server(EXAMPLES, args=[
            "--model-control-mode", "explicit", "--load-model", "identity",
            "--http-restricted-api=model-repository,model-config:admin-key=s3cret",
            "--http-restricted-api=inference:infer-key=go",
            "--grpc-restricted-protocol=model-repository,model-config:admin-key=s3cret",
            "--grpc-restricted-protocol=inference:infer-key=go"]) as srv:
        yield srv


def http(server, method: str, path: str, headers: dict | None = None,
         body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body,
                                     method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize("method,path", [
    ("POST", "/v2/repository/index"), ("POST", "/v2/repository/models/identity/load"),
    ("GET", "/v2/models/identity/config"), ("GET", "/v2/models/identity/versions/1/config"),
    ("POST", "/v2/models/identity/infer"), ("POST", "/v2/models/identity/generate"),
    ("GET", "/v2/repository/index")])  # the group is checked before the method, as Triton
def test_http_restricted_apis_are_403_without_their_header(server, method, path):
    status, body = http(server, method, path, {"admin-key": "wrong"}, b"{}" if method ==
                        "POST" else None)
    assert status == 403, body
    key = "infer-key" if "/infer" in path or "/generate" in path else "admin-key"
    assert json.loads(body) == {"error": f"This API is restricted, expecting header '{key}'"}


def test_http_restricted_apis_serve_with_their_header(server):
    assert http(server, "POST", "/v2/repository/index", ADMIN, b"{}")[0] == 200
    assert http(server, "GET", "/v2/models/identity/config", ADMIN)[0] == 200
    assert http(server, "POST", "/v2/repository/models/identity/load", ADMIN)[0] == 200
    a = np.arange(4, dtype=np.int32)
    result = server.http_client().infer("identity", [http_input("INPUT_INT32", a)],
                                        headers=INFER)
    assert (result.as_numpy("OUTPUT_INT32") == a).all()


def test_http_groups_not_restricted_stay_open(server):
    for path in ("/v2/health/ready", "/v2", "/v2/models/identity", "/v2/models/stats"):
        assert http(server, "GET", path)[0] == 200, path


def test_tritonclient_http_gets_the_403(server):
    with pytest.raises(InferenceServerException) as info:
        server.http_client().infer("identity", [http_input("INPUT_INT32", np.ones(2, np.int32))])
    assert info.value.status() == "403"
    assert "This API is restricted, expecting header 'infer-key'" in str(info.value)


def test_grpc_restricted_protocols_are_unavailable_without_their_metadata(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for call in (lambda: client.load_model("identity", headers={"x": "y"}),
                 lambda: client.get_model_config("identity"),
                 lambda: client.get_model_repository_index(
                     headers={"triton-grpc-protocol-admin-key": "wrong"}),
                 lambda: client.infer("identity", [grpc_input("INPUT_INT32",
                                                              np.ones(2, np.int32))])):
        with pytest.raises(InferenceServerException) as info:
            call()
        assert info.value.status() == "StatusCode.UNAVAILABLE", info.value
        assert "This protocol is restricted, expecting header 'triton-grpc-protocol-" \
            in info.value.message()
    assert client.is_server_ready() and client.get_model_metadata("identity").name
    client.close()


def test_grpc_restricted_protocols_serve_with_their_metadata(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.load_model("identity", headers=GRPC_ADMIN)
    assert client.get_model_config("identity", headers=GRPC_ADMIN).config.name == "identity"
    a = np.arange(4, dtype=np.int32)
    result = client.infer("identity", [grpc_input("INPUT_INT32", a)], headers=GRPC_INFER)
    assert (result.as_numpy("OUTPUT_INT32") == a).all()
    client.close()


@pytest.mark.parametrize("headers,served", [(GRPC_INFER, True), ({}, False)])
def test_grpc_streams_are_restricted_as_inference(server, headers, served):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put(error or result),
                        headers=headers)
    a = np.arange(3, dtype=np.int32)
    try:
        client.async_stream_infer("identity", [grpc_input("INPUT_INT32", a)])
    except InferenceServerException:  # the refused stream may be over already
        assert not served
    outcome = results.get(timeout=30)
    client.stop_stream()
    client.close()
    if served:
        assert (outcome.as_numpy("OUTPUT_INT32") == a).all()
    else:
        assert isinstance(outcome, InferenceServerException)
        assert "This protocol is restricted" in str(outcome)


@pytest.mark.parametrize("flags,message", [
    (["--http-restricted-api=bogus:k=v"], "unknown restricted api 'bogus'"),
    (["--grpc-restricted-protocol=health,nope:k=v"], "unknown restricted protocol 'nope'"),
    (["--grpc-restricted-protocol=trace:k=v", "--grpc-restricted-protocol=logging,trace:k=w"],
     "restricted protocol 'trace' can not be specified in multiple config groups"),
    (["--http-restricted-api=inference"],
     "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got inference"),
])
def test_restriction_flags_are_parsed_with_tritons_errors(flags, message):
    http, grpc_port, metrics = free_ports(3)
    done = subprocess.run([sys.executable, "-m", "pbserve", "--model-repository",
                           str(EXAMPLES), "--model-control-mode", "explicit", "--http-port",
                           str(http), "--grpc-port", str(grpc_port), "--metrics-port",
                           str(metrics), *flags], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
