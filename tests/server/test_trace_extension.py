"""Triton's trace extension: /v2[/models/M]/trace/setting, gRPC TraceSetting, the
--trace-* flags, and the JSON trace file of sampled requests, through a real server."""

from __future__ import annotations

import http.client
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import running_server

MODEL = Path(__file__).parents[1] / "models_ext" / "log_probe"
STAMPS = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_END", "REQUEST_END"]
DEFAULTS = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
            "log_frequency": "0", "trace_file": "", "trace_mode": "triton"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(MODEL, repo / "log_probe")
    return repo


def _infer(client, request_id: str) -> None:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensor = module.InferInput("MARK", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"t"], dtype=object))
    client.infer("log_probe", [tensor], request_id=request_id)


def _traces(path: Path) -> dict[int, dict]:
    """id -> {"model": the model record, "stamps": [(name, ns), ...]}."""
    traces: dict[int, dict] = {}
    for record in json.loads(path.read_text()):
        trace = traces.setdefault(record["id"], {"stamps": []})
        if "model_name" in record:
            trace["model"] = record
        for stamp in record.get("timestamps", []):
            trace["stamps"].append((stamp["name"], stamp["ns"]))
    return traces


def _post(server, path: str, body: object) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server.http_url, timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(body))
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def test_sampled_requests_are_written_with_tritons_timestamps(repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    args = ["--trace-config", f"triton,file={trace_file}", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1"]
    with running_server(repo, args=args) as server:
        client = server.http_client()
        assert "trace" in client.get_server_metadata()["extensions"]
        assert client.get_trace_settings() == {
            **DEFAULTS, "trace_level": ["TIMESTAMPS"], "trace_rate": "1",
            "trace_file": str(trace_file)}
        for i in range(3):
            _infer(client, f"r{i}")
        _infer(server.grpc_client(), "g0")
        bad = httpclient.InferInput("MARK", [2], "BYTES")  # the wrong shape: refused
        bad.set_data_from_numpy(np.array([b"a", b"b"], dtype=object))
        with pytest.raises(InferenceServerException):
            client.infer("log_probe", [bad], request_id="bad")
        assert not trace_file.exists()  # log_frequency 0: written at shutdown
    traces = _traces(trace_file)
    assert len(traces) == 5
    [refused] = [t for t in traces.values() if t["model"]["request_id"] == "bad"]
    assert [name for name, _ in refused["stamps"]] == ["REQUEST_START", "REQUEST_END"]
    del traces[refused["model"]["id"]]
    for trace in traces.values():
        assert [name for name, _ in trace["stamps"]] == STAMPS
        times = [ns for _, ns in trace["stamps"]]
        assert times == sorted(times)
        assert trace["model"]["model_name"] == "log_probe"
        assert trace["model"]["model_version"] == 1
    assert sorted(t["model"]["request_id"] for t in traces.values()) == ["g0", "r0", "r1", "r2"]


def test_rate_count_and_log_frequency(repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    args = ["--trace-file", str(trace_file), "--trace-level", "TIMESTAMPS"]
    with running_server(repo, args=args) as server:
        client = server.http_client()
        assert client.update_trace_settings(settings={"trace_rate": "2", "trace_count": "2"}) \
            == {**DEFAULTS, "trace_level": ["TIMESTAMPS"], "trace_rate": "2",
                "trace_count": "2", "trace_file": str(trace_file)}
        for i in range(6):
            _infer(client, f"c{i}")
        # every 2nd request, 2 of them; the count ran out, so they are in file .0 now
        indexed = Path(f"{trace_file}.0")
        assert sorted(t["model"]["request_id"] for t in _traces(indexed).values()) == \
            ["c1", "c3"]
        assert client.get_trace_settings()["trace_count"] == "0"

        client.update_trace_settings(settings={"trace_rate": "1", "trace_count": "-1",
                                               "log_frequency": "2"})
        for i in range(3):
            _infer(client, f"f{i}")
        assert sorted(t["model"]["request_id"]
                      for t in _traces(Path(f"{trace_file}.1")).values()) == ["f0", "f1"]
        assert not Path(f"{trace_file}.2").exists()
    assert [t["model"]["request_id"]
            for t in _traces(Path(f"{trace_file}.2")).values()] == ["f2"]


def test_model_setting_overrides_the_global_one(repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    args = ["--trace-config", f"triton,file={trace_file}", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1"]
    with running_server(repo, args=args) as server:
        client = server.http_client()
        model = client.update_trace_settings("log_probe", {"trace_level": ["OFF"]})
        assert model["trace_level"] == ["OFF"] and model["trace_rate"] == "1"
        assert client.get_trace_settings()["trace_level"] == ["TIMESTAMPS"]
        _infer(client, "off")
        # null: the model follows the global setting again
        assert client.update_trace_settings("log_probe", {"trace_level": None})[
            "trace_level"] == ["TIMESTAMPS"]
        _infer(client, "on")
        with pytest.raises(InferenceServerException,
                           match="Request for unknown model : nope"):
            client.get_trace_settings("nope")
    assert [t["model"]["request_id"] for t in _traces(trace_file).values()] == ["on"]


@pytest.mark.parametrize("body, status, message", [
    ({"trace_file": "/tmp/x"}, 501,
     "trace file location can not be updated through network protocol"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, 400,
     "Expect only one trace level 'OFF' is specified"),
    ({"trace_rate": "abc"}, 400, "Unable to parse 'trace_rate', got: abc"),
    ({"trace_rate": 5}, 400, "attempt to access JSON non-string as string"),
    ({"trace_count": "-2"}, 400, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
    ({"log_frequency": "99999999999"}, 400,
     "Unable to parse 'log_frequency', value is out of range [ 0, 4294967295 ], "
     "got: 99999999999"),
])
def test_http_errors_are_tritons_and_change_nothing(repo, body, status, message):
    with running_server(repo) as server:
        assert _post(server, "/v2/trace/setting",
                     {"trace_rate": "7", **body}) == (status, {"error": message})
        assert server.http_client().get_trace_settings() == DEFAULTS


def test_grpc_trace_setting(repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    with running_server(repo, args=["--trace-file", str(trace_file)]) as server:
        client = server.grpc_client()
        got = client.get_trace_settings(as_json=True)["settings"]
        assert got["trace_level"] == {"value": ["OFF"]}
        assert got["trace_file"] == {"value": [str(trace_file)]}
        updated = client.update_trace_settings(
            settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}, as_json=True)
        assert updated["settings"]["trace_rate"] == {"value": ["1"]}
        _infer(client, "g1")
        model = client.update_trace_settings("log_probe", {"trace_count": "0"}, as_json=True)
        assert model["settings"]["trace_count"] == {"value": ["0"]}
        _infer(client, "g2")  # the model's count is 0: not traced
        for settings, message in (
                ({"trace_rate": ["1", "2"]}, "expect only 1 value for 'trace_rate'"),
                ({"trace_file": "x"},
                 "trace file location can not be updated through network protocol")):
            with pytest.raises(InferenceServerException, match=message):
                client.update_trace_settings(settings=settings)
        with pytest.raises(InferenceServerException) as err:
            client.get_trace_settings("nope")
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert [t["model"]["request_id"] for t in _traces(trace_file).values()] == ["g1"]
