"""Triton's logging extension (/v2/logging, gRPC LogSettings) and the --log-* flags,
through a real server, its stubs and tritonclient."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import running_server

MODEL = Path(__file__).parents[1] / "models_ext" / "log_probe"
DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
            "log_verbose_level": 0, "log_format": "default"}


def _infer(client, mark: str) -> None:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensor = module.InferInput("MARK", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([mark.encode()], dtype=object))
    out = client.infer("log_probe", [tensor]).as_numpy("MARK_OUT")
    assert out[0] == mark.encode()


def _post(server, body: bytes | None, method: str = "POST") -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server.http_url, timeout=10)
    try:
        conn.request(method, "/v2/logging", body=body)
        reply = conn.getresponse()
        data = reply.read()
        return reply.status, json.loads(data) if data else {}
    finally:
        conn.close()


def _lines_with(text: str, path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if text in line]


def _wait_lines(text: str, path: Path, timeout: float = 5.0) -> list[str]:
    """The lines with `text`, once there are any: a stub's log lines reach the file
    through the parent, a moment after the response that the model sent with them."""
    deadline = time.monotonic() + timeout
    while not (lines := _lines_with(text, path)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return lines


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    return tmp_path / "server.log"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository holding log_probe alone."""
    repo = tmp_path / "repo"
    shutil.copytree(MODEL, repo / "log_probe")
    return repo


def test_every_request_sent_after_a_change_runs_with_it(log_file: Path, repo: Path) -> None:
    """The change reaches an idle stub ahead of the next request (its main queue), not
    only on the control queue, which its control thread may read after the main loop
    has taken that request: verbose lines appear exactly for the requests sent while
    verbose logging was on."""
    with running_server(repo, args=["--log-file", str(log_file)]) as server:
        client = server.http_client()
        for i in range(60):
            client.update_log_settings({"log_verbose_level": i % 2})
            _infer(client, f"turn{i}.")
        _wait_lines("info turn59.", log_file)
        verbose = {i for i in range(60) if _lines_with(f"verbose turn{i}.", log_file)}
        assert verbose == set(range(1, 60, 2))


def test_http_settings_follow_into_parent_and_stubs(log_file: Path, repo: Path) -> None:
    with running_server(repo, args=["--log-file", str(log_file)]) as server:
        client = server.http_client()
        assert "logging" in client.get_server_metadata()["extensions"]
        assert client.get_log_settings() == {**DEFAULTS, "log_file": str(log_file)}

        _infer(client, "m1")
        assert not _lines_with("verbose m1", log_file)
        assert len(_wait_lines("info m1", log_file)) == 1
        assert _lines_with("log_probe info in initialize", log_file)
        assert not _lines_with("log_probe verbose in initialize", log_file)

        settings = client.update_log_settings({"log_verbose_level": 1})
        assert settings == {**DEFAULTS, "log_file": str(log_file), "log_verbose_level": 1}
        _infer(client, "m2")
        assert len(_wait_lines("verbose m2", log_file)) == 1

        client.update_log_settings({"log_verbose_level": 0, "log_info": False,
                                    "log_error": False})
        _infer(client, "m3")
        assert not _lines_with("verbose m3", log_file)
        assert not _lines_with("info m3", log_file)
        assert not _lines_with("error m3", log_file)
        assert len(_wait_lines("warning m3", log_file)) == 1

        client.update_log_settings({"log_info": True, "log_error": True,
                                    "log_format": "ISO8601"})
        _infer(client, "m4")
        [line] = _lines_with("info m4", log_file)
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ ", line), line
        [line] = _lines_with("error m4", log_file)
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ E \d+ ", line), line


def test_http_errors_are_tritons(log_file: Path, repo: Path) -> None:
    with running_server(repo, args=["--log-file", str(log_file)]) as server:
        client = server.http_client()
        cases = [
            ({"log_file": "/tmp/elsewhere.log"}, 501,
             "log file location can not be updated through network protocol"),
            ({"log_info": "false"}, 400, "attempt to access JSON non-boolean as boolean"),
            ({"log_verbose_level": -1}, 400,
             "attempt to access JSON non-unsigned-integer as unsigned-integer"),
            ({"log_format": "json"}, 503, "invalid argument for --log_format, got: json"),
        ]
        for body, status, message in cases:
            assert _post(server, json.dumps(body).encode()) == (status, {"error": message})
            with pytest.raises(InferenceServerException, match=re.escape(message)):
                client.update_log_settings(body)
        # settings named before the bad one stay applied, as in Triton
        with pytest.raises(InferenceServerException):
            client.update_log_settings({"log_warning": False, "log_format": "json"})
        assert client.get_log_settings()["log_warning"] is False
        # nulls leave settings as they are; an empty body changes nothing
        status, reply = _post(server, b'{"log_file": null, "log_info": null}')
        assert status == 200 and reply["log_info"] is True
        assert _post(server, None)[0] == 200
        assert _post(server, b"{}", method="PUT")[0] == 405
        assert _post(server, b"[1]")[0] == 400


def test_grpc_log_settings(log_file: Path, repo: Path) -> None:
    with running_server(repo, args=["--log-file", str(log_file)]) as server:
        client = server.grpc_client()
        got = client.get_log_settings(as_json=True)["settings"]
        assert got["log_info"] == {"bool_param": True}
        assert got["log_verbose_level"] == {"uint32_param": 0}
        assert got["log_file"] == {"string_param": str(log_file)}
        assert "logging" in client.get_server_metadata(as_json=True)["extensions"]

        client.update_log_settings({"log_verbose_level": 2})
        _infer(client, "g1")
        assert len(_wait_lines("verbose g1", log_file)) == 1
        assert server.http_client().get_log_settings()["log_verbose_level"] == 2

        cases = [
            # tritonclient sends a None as a SettingValue with no value: the wrong kind
            ({"log_info": None}, "INVALID_ARGUMENT", "expect boolean for 'log_info'"),
            ({"log_verbose_level": None}, "INVALID_ARGUMENT",
             "expect int32 for 'log_verbose_level'"),
            ({"log_format": None}, "INVALID_ARGUMENT", "expect string for 'log_format'"),
            ({"log_format": "json"}, "INVALID_ARGUMENT",
             "invalid argument for log_format, got: json"),
            ({"log_file": ""}, "UNIMPLEMENTED",
             "log file location can not be updated through network protocol"),
        ]
        for settings, status, message in cases:
            with pytest.raises(InferenceServerException) as err:
                client.update_log_settings(settings)
            assert err.value.status() == f"StatusCode.{status}", settings
            assert err.value.message() == message, settings


def test_stub_started_later_gets_current_settings(log_file: Path, repo: Path) -> None:
    args = ["--log-file", str(log_file), "--model-control-mode", "explicit"]
    with running_server(repo, args=args) as server:
        client = server.http_client()
        client.update_log_settings({"log_verbose_level": 1})
        client.load_model("log_probe")
        assert _lines_with("log_probe verbose in initialize", log_file)
        _infer(client, "later")
        assert _wait_lines("verbose later", log_file)


def test_log_flags(tmp_path: Path, repo: Path) -> None:
    log_file = tmp_path / "flags.log"
    console = tmp_path / "console.log"
    args = ["--log-file", str(log_file), "--log-format", "ISO8601", "--log-info", "false",
            "--log-verbose", "1"]
    with running_server(repo, args=args, log_path=console) as server:
        client = server.http_client()
        assert client.get_log_settings() == {
            **DEFAULTS, "log_file": str(log_file), "log_info": False,
            "log_verbose_level": 1, "log_format": "ISO8601"}
        _infer(client, "f1")
    assert not _lines_with("Started HTTPService", log_file)  # an INFO line: off
    assert not _lines_with("info f1", log_file)
    [line] = _lines_with("verbose f1", log_file)
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ ", line), line
    assert _wait_lines("warning f1", log_file)
    assert not _lines_with("warning f1", console)  # the log went to the file only


def test_default_format_is_glog(tmp_path: Path, repo: Path) -> None:
    log_file = tmp_path / "glog.log"
    with running_server(repo, args=["--log-file", str(log_file)]) as server:
        _infer(server.http_client(), "d1")
    [line] = _lines_with("warning d1", log_file)
    assert re.match(r"W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ ", line), line
    assert _lines_with("Started HTTPService", log_file)
