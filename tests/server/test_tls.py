"""TLS with tritonserver's flags (and pbserve's HTTP equivalents), against a real pbserve
with certificates the test makes (openssl): tritonclient talks HTTPS and gRPC over TLS,
plain-text clients get nothing, and with mutual TLS only clients holding a certificate
the root signed get in."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from client_inputs import grpc_input, http_input
from pbserve.testing import free_ports, running_server

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"
LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(directory: Path, name: str) -> None:
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
            "-subj", f"/CN={name}", cwd=directory)


def make_cert(directory: Path, name: str, ca: str, san: str | None = None) -> None:
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
            cwd=directory)
    extensions = directory / f"{name}.ext"
    extensions.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile",
            extensions.name, cwd=directory)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    directory = tmp_path_factory.mktemp("certs")
    make_ca(directory, "ca")
    make_ca(directory, "rogue")
    make_cert(directory, "server", "ca", "DNS:localhost,IP:127.0.0.1")
    make_cert(directory, "client", "ca")
    make_cert(directory, "intruder", "rogue")
    return directory


def tls_flags(certs: Path, proto: str, mutual: bool) -> list[str]:
    flags = [f"--{proto}-use-ssl", "true", f"--{proto}-server-cert", str(certs / "server.crt"),
             f"--{proto}-server-key", str(certs / "server.key")]
    if mutual:
        flags += [f"--{proto}-use-ssl-mutual", "true", f"--{proto}-root-cert",
                  str(certs / "ca.crt")]
    return flags


def client_context(certs: Path, who: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certs / "ca.crt")
    if who is not None:
        context.load_cert_chain(certs / f"{who}.crt", certs / f"{who}.key")
    return context


def https_exchange(port: int, context: ssl.SSLContext) -> bytes:
    """One request over TLS; what came back (b"" if the server ended the connection)."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with contextlib.suppress(ssl.SSLError, ConnectionResetError, BrokenPipeError):
            with context.wrap_socket(raw, server_hostname="localhost") as sock:
                sock.sendall(LIVE)
                while chunk := sock.recv(65536):
                    received += chunk
    return received


@pytest.fixture(scope="module", params=[1, 2], ids=["in-process", "2-frontend-processes"])
def server(request, certs):
    """With frontend processes the handshakes happen in them, behind their shared accept
    loop (server/gated_accept.py)."""
    frontends = ["--frontend-processes", "2"] if request.param > 1 else []
    with running_server(EXAMPLES, args=[
            "--model-control-mode", "explicit", "--load-model", "identity",
            "--http-header-timeout-secs", "1", *frontends,
            *tls_flags(certs, "http", False), *tls_flags(certs, "grpc", False)],
            ready_ssl=client_context(certs)) as srv:
        yield srv


def test_tritonclient_infers_over_https(server, certs):
    client = httpclient.InferenceServerClient(
        f"localhost:{server.http_port}", ssl=True, ssl_options={"ca_certs": str(certs / "ca.crt")})
    for size in (4, 1 << 20):  # a reply joined in one write, and one written buffer by buffer
        a = np.arange(size, dtype=np.int32)
        result = client.infer("identity", [http_input("INPUT_INT32", a)])
        assert (result.as_numpy("OUTPUT_INT32") == a).all()
    client.close()


def test_tritonclient_infers_over_grpc_with_tls(server, certs):
    client = grpcclient.InferenceServerClient(f"localhost:{server.grpc_port}", ssl=True,
                                              root_certificates=str(certs / "ca.crt"))
    a = np.arange(1 << 20, dtype=np.int32)
    result = client.infer("identity", [grpc_input("INPUT_INT32", a)])
    assert (result.as_numpy("OUTPUT_INT32") == a).all()
    client.close()


def test_plain_text_clients_get_no_answer(server, certs):
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(LIVE)
        with contextlib.suppress(ConnectionResetError):
            assert b"HTTP/1.1 200" not in sock.recv(65536)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as info:
        client.is_server_live(client_timeout=5)
    client.close()
    assert "UNAVAILABLE" in info.value.status() or "DEADLINE" in info.value.status()
    assert https_exchange(server.http_port, client_context(certs)).startswith(b"HTTP/1.1 200")


def test_a_handshake_that_never_comes_is_cut_off_with_the_header_timeout(server):
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(65536) == b""  # closed by the server, not our 10 s timeout


@pytest.fixture(scope="module")
def mutual(certs):
    with running_server(EXAMPLES, args=["--model-control-mode", "explicit",
                                        *tls_flags(certs, "http", True),
                                        *tls_flags(certs, "grpc", True)],
                        ready_ssl=client_context(certs, "client")) as srv:
        yield srv


@pytest.mark.parametrize("who,served", [("client", True), (None, False),
                                        ("intruder", False)])
def test_mutual_tls_over_http_takes_only_certificates_the_root_signed(mutual, certs, who,
                                                                        served):
    received = https_exchange(mutual.http_port, client_context(certs, who))
    assert received.startswith(b"HTTP/1.1 200") == served, received[:100]


@pytest.mark.parametrize("who,served", [("client", True), (None, False),
                                        ("intruder", False)])
def test_mutual_tls_over_grpc_takes_only_certificates_the_root_signed(mutual, certs, who,
                                                                        served):
    keys = {} if who is None else {"private_key": str(certs / f"{who}.key"),
                                   "certificate_chain": str(certs / f"{who}.crt")}
    client = grpcclient.InferenceServerClient(f"localhost:{mutual.grpc_port}", ssl=True,
                                              root_certificates=str(certs / "ca.crt"), **keys)
    try:
        if served:
            assert client.is_server_live(client_timeout=10)
        else:
            with pytest.raises(InferenceServerException):
                client.is_server_live(client_timeout=10)
    finally:
        client.close()


@pytest.mark.parametrize("flags,message", [
    (["--grpc-use-ssl", "true"], "--grpc-use-ssl needs --grpc-server-cert"),
    (["--http-use-ssl-mutual", "true", "--http-server-cert", "{certs}/server.crt",
      "--http-server-key", "{certs}/server.key"], "--http-use-ssl-mutual needs --http-root-cert"),
    (["--http-use-ssl", "--http-server-cert", "{certs}/server.crt", "--http-server-key",
      "{certs}/client.key"], "cannot be used"),
    (["--grpc-use-ssl", "--grpc-server-cert", "{certs}/none.crt", "--grpc-server-key",
      "{certs}/server.key"], "cannot read the server certificate"),
])
def test_tls_flags_that_cannot_work_stop_the_server_with_the_reason(certs, flags, message):
    http, grpc_port, metrics = free_ports(3)
    command = [sys.executable, "-m", "pbserve", "--model-repository", str(EXAMPLES),
               "--model-control-mode", "explicit", "--http-port", str(http), "--grpc-port",
               str(grpc_port), "--metrics-port", str(metrics),
               *(flag.format(certs=certs) for flag in flags)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr

