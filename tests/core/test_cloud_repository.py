"""Cloud model repositories: `--model-repository s3://host:port/bucket/path` served from a
real S3 server the test starts (moto's server mode on 127.0.0.1, its own process), with
Triton's credential sources, followed in poll mode, its private copy removed at exit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

pytest.importorskip("s3fs")
boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from pbserve.core.repository.cloud_credentials import storage_options  # noqa: E402
from pbserve.testing import RunningServer, free_ports, stop_process_group  # noqa: E402

BUCKET = "models-bucket"
SECRET = "s3cr3t-9f2c"  # never in the server's log
CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""
MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + {add})])
            for r in requests]
"""


@pytest.fixture
def s3() -> Iterator[str]:
    """A moto S3 server process on 127.0.0.1: its endpoint."""
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        stop_process_group(proc, 10)


@pytest.fixture
def bucket(s3: str, monkeypatch):
    """The test's bucket, through a boto3 client with moto's (any) credentials."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    client = boto3.client("s3", endpoint_url=s3, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key=SECRET)
    client.create_bucket(Bucket=BUCKET)
    return client


def put_model(client, name: str, add: int) -> None:
    client.put_object(Bucket=BUCKET, Key=f"repo/{name}/config.pbtxt",
                      Body=CONFIG.replace("{name}", name).encode())
    client.put_object(Bucket=BUCKET, Key=f"repo/{name}/1/model.py",
                      Body=MODEL.replace("{add}", str(add)).encode())


def infer(server: RunningServer, name: str) -> float:
    tensor = httpclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    return float(server.http_client().infer(name, [tensor]).as_numpy("OUT")[0])


def wait_until(check, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _ready(server: RunningServer, name: str) -> bool:
    try:
        return server.http_client().is_model_ready(name)
    except Exception:  # noqa: BLE001 - a model being swapped
        return False


def serve(tmp_path: Path, s3: str, env: dict[str, str], *args: str) -> RunningServer:
    url = f"s3://{s3.removeprefix('http://')}/{BUCKET}/repo"
    env = {"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), **env}
    server = RunningServer([url], args=["--log-verbose", "1", *args],
                           log_path=tmp_path / "server.log", env=env)
    server.wait_ready(180)
    return server


def test_an_s3_repository_is_copied_privately_and_followed_in_poll_mode(tmp_path, s3, bucket):
    put_model(bucket, "adder", 1)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1"}
    server = serve(tmp_path, s3, env, "--model-control-mode", "poll",
                   "--repository-poll-secs", "0.3")
    try:
        assert infer(server, "adder") == 2.0
        local = Path(re.search(r"is copied to (\S+)", server.log_text()).group(1))
        assert local.stat().st_mode & 0o777 == 0o700
        assert (local / "adder" / "1" / "model.py").is_file()
        put_model(bucket, "adder", 2)  # a changed model is reloaded
        wait_until(lambda: _ready(server, "adder") and infer(server, "adder") == 3.0)
        put_model(bucket, "second", 5)  # a new one is loaded
        wait_until(lambda: _ready(server, "second"))
        assert infer(server, "second") == 6.0
        for key in ("repo/second/config.pbtxt", "repo/second/1/model.py"):
            bucket.delete_object(Bucket=BUCKET, Key=key)
        wait_until(lambda: not _ready(server, "second"))  # a deleted one is unloaded
        assert not (local / "second").exists()
    finally:
        assert server.stop() == 0
    assert not local.exists()
    log = server.log_text()
    assert SECRET not in log
    # what is copied, with sizes, and when it is done; a poll that finds no change: nothing
    assert re.search(r"copying 2 files \(\d+ B\) of model repository s3://\S+ to ", log), log
    assert re.search(r"copied 2 files \(\d+ B\) of model repository s3://\S+ in ", log)
    assert re.search(r"copied 1 file \(\d+ B\) of model repository", log)  # adder's change
    assert "removed 2 files no longer in model repository" in log
    assert log.count("copying ") == 3


def test_an_explicit_load_reads_the_repository_again(tmp_path, s3, bucket):
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1"}
    server = serve(tmp_path, s3, env, "--model-control-mode", "explicit")
    try:
        put_model(bucket, "adder", 4)  # put after the start
        server.http_client().load_model("adder")
        assert infer(server, "adder") == 5.0
    finally:
        assert server.stop() == 0


def test_credentials_come_from_tritons_credential_file(tmp_path, s3, bucket):
    put_model(bucket, "adder", 1)
    url = f"s3://{s3.removeprefix('http://')}/{BUCKET}"
    credentials = tmp_path / "cloud_credential.json"
    credentials.write_text(json.dumps({"s3": {
        "": {"key_id": "", "secret_key": "", "region": "", "session_token": "", "profile": ""},
        url: {"key_id": "testing", "secret_key": SECRET, "region": "us-east-1",
              "session_token": "", "profile": ""}}}))
    # no AWS_* credentials in the environment: only the file's
    server = serve(tmp_path, s3, {"TRITON_CLOUD_CREDENTIAL_PATH": str(credentials)})
    try:
        assert infer(server, "adder") == 2.0
    finally:
        assert server.stop() == 0
    assert SECRET not in server.log_text()


def test_a_repository_that_cannot_be_read_stops_the_start(tmp_path, s3, bucket):
    url = f"s3://{s3.removeprefix('http://')}/no-such-bucket/repo"
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    server = RunningServer([url], log_path=tmp_path / "server.log", env=env)
    assert server.proc.wait(120) == 1
    server.stop()
    log = server.log_text()
    assert f"failed to read model repository {url}" in log and SECRET not in log


def test_the_longest_matching_credential_wins(tmp_path):
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps({
        "s3": {"": {"key_id": "any", "secret_key": "a"},
               "s3://bucket-2": {"key_id": "two", "secret_key": "b", "region": "eu-west-1"}},
        "gs": {"": "/creds/default.json", "gs://gcs-bucket-002": "/creds/2.json"},
        "as": {"": {"account_str": "acct", "account_key": "k"}}}))
    env = {"TRITON_CLOUD_CREDENTIAL_PATH": str(path)}
    assert storage_options("s3", "s3://bucket-2/models", env=env) == {
        "key": "two", "secret": "b", "client_kwargs": {"region_name": "eu-west-1"}}
    assert storage_options("s3", "s3://other/models", env=env) == {"key": "any", "secret": "a"}
    assert storage_options("gs", "gs://gcs-bucket-002/m", env=env) == {"token": "/creds/2.json"}
    assert storage_options("gs", "gs://elsewhere/m", env=env) == {"token": "/creds/default.json"}
    assert storage_options("as", "as://acct/c/m", "acct", env=env) == {
        "account_name": "acct", "account_key": "k"}
    assert storage_options("as", "as://a/c", "a", env={"AZURE_STORAGE_KEY": "k2"}) == {
        "account_name": "a", "account_key": "k2"}


@pytest.fixture
def gcs() -> Iterator[str]:
    """A gcp-storage-emulator process on 127.0.0.1 with the bucket "gb": its endpoint."""
    pytest.importorskip("gcsfs")
    pytest.importorskip("gcp_storage_emulator")
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "gcp_storage_emulator", "start", "-H",
                             "127.0.0.1", "--port", str(port), "--default-bucket", "gb",
                             "--in-memory", "--quiet"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/storage/v1/b/gb", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("gcp-storage-emulator did not start") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        stop_process_group(proc, 10)


def test_a_gcs_repository_is_served_and_followed(tmp_path, gcs):
    def upload(name: str, body: str) -> None:  # the JSON API's simple upload
        request = urllib.request.Request(
            f"{gcs}/upload/storage/v1/b/gb/o?uploadType=media&name={name}",
            data=body.encode(), method="POST")
        urllib.request.urlopen(request, timeout=10).close()

    def put(add: int) -> None:
        upload("repo/adder/config.pbtxt", CONFIG.replace("{name}", "adder"))
        upload("repo/adder/1/model.py", MODEL.replace("{add}", str(add)))

    put(1)
    # the emulator speaks GCS's JSON API only: gcsfs's gRPC bucket probe is turned off
    env = {"STORAGE_EMULATOR_HOST": gcs, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
           "GOOGLE_APPLICATION_CREDENTIALS": ""}
    server = RunningServer(["gs://gb/repo"], args=["--model-control-mode", "poll",
                                                   "--repository-poll-secs", "0.3"],
                           log_path=tmp_path / "server.log", env=env)
    try:
        server.wait_ready(180)
        assert infer(server, "adder") == 2.0
        local = Path(re.search(r"is copied to (\S+)", server.log_text()).group(1))
        put(2)
        wait_until(lambda: _ready(server, "adder") and infer(server, "adder") == 3.0)
    finally:
        assert server.stop() == 0
    assert not local.exists()
