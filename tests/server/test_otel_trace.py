"""Triton's OpenTelemetry trace mode through a real server: its spans reach an OTLP/HTTP
receiver the test runs (decoding ExportTraceServiceRequest), under the client's W3C
`traceparent` (HTTP header, gRPC metadata), with a BLS child under its caller's compute
span, and the model reads its span's context with `request.trace().get_context()`;
in mode triton the same BLS call is a child record (`parent_id`)."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest)

from pbserve.testing import running_server  # noqa: E402

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN", data_type: TYPE_FP32, dims: [ 1 ] }} ]
output [ {{ name: "CONTEXT", data_type: TYPE_STRING, dims: [ 1 ] }},
         {{ name: "CHILD_CONTEXT", data_type: TYPE_STRING, dims: [ 1 ] }} ]
"""
# The caller hands its trace to a BLS call and answers both contexts.
CALLER = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="callee", inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["CONTEXT"], trace=request.trace())
            reply = call.exec()
            if reply.has_error():
                raise pb_utils.TritonModelException(reply.error().message())
            child = pb_utils.get_output_tensor_by_name(reply, "CONTEXT").as_numpy()
            own = request.trace().get_context() or ""
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("CONTEXT", np.array([own.encode()], dtype=object)),
                pb_utils.Tensor("CHILD_CONTEXT", child)]))
        return responses
"""
CALLEE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "CONTEXT", np.array([(r.trace().get_context() or "").encode()], dtype=object))])
            for r in requests]
"""
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP collector on 127.0.0.1: the spans of every POST /v1/traces."""

    def __init__(self) -> None:
        self.spans: list = []
        self.resources: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    receiver.resources.append({a.key: a.value.string_value for a in
                                               resource_spans.resource.attributes})
                    for scope in resource_spans.scope_spans:
                        receiver.spans += scope.spans
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name, code in (("caller", CALLER), ("callee", CALLEE)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (repo / name / "1" / "model.py").write_text(code)
    return repo


def _infer(client, module, headers: dict[str, str]) -> tuple[dict | None, dict | None]:
    """The caller's and the callee's contexts (None: not traced)."""
    tensor = module.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    result = client.infer("caller", [tensor], request_id="r1", headers=headers)
    own, child = (result.as_numpy(name)[0].decode() for name in ("CONTEXT", "CHILD_CONTEXT"))
    return (json.loads(own) if own else None), (json.loads(child) if child else None)


def _attributes(span) -> dict:
    return {a.key: a.value.string_value or a.value.int_value for a in span.attributes}


def test_spans_follow_the_clients_traceparent_and_the_bls_call(repo, receiver):
    args = ["--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1", "--trace-config", f"opentelemetry,url={receiver.url}",
            "--trace-config", "opentelemetry,resource=service.name=pbserve-test",
            "--trace-config", "opentelemetry,resource=deployment=ci",
            "--trace-config", "opentelemetry,bsp_schedule_delay=50"]
    with running_server(repo, args=args) as server:
        http_client = server.http_client()
        settings = http_client.get_trace_settings()
        assert settings["trace_mode"] == "opentelemetry"
        assert settings["url"] == receiver.url and "trace_file" not in settings
        parent = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
        own, child = _infer(http_client, httpclient, {"traceparent": parent})
        grpc_trace = "0af7651916cd43dd8448eb211c80319c"
        g_own, _ = _infer(server.grpc_client(), grpcclient,
                          {"traceparent": f"00-{grpc_trace}-b7ad6b7169203331-01"})
        _infer(http_client, httpclient, {})  # rate=1: traced too, in a trace of its own
    # the server flushed its spans at shutdown
    assert {"service.name": "pbserve-test", "deployment": "ci"}.items() <= \
        receiver.resources[0].items()
    names = sorted(s.name for s in receiver.spans if s.trace_id.hex() == TRACE_ID)
    assert names == ["InferRequest", "callee", "caller", "compute", "compute"]
    spans = {s.name: s for s in receiver.spans if s.trace_id.hex() == TRACE_ID}
    root = spans["InferRequest"]
    assert root.parent_span_id.hex() == CLIENT_SPAN
    caller = [s for s in receiver.spans if s.name == "caller"
              and s.trace_id.hex() == TRACE_ID][0]
    assert caller.parent_span_id == root.span_id
    assert _attributes(caller) == {
        "triton.model_name": "caller", "triton.model_version": 1,
        "triton.trace_id": _attributes(caller)["triton.trace_id"],
        "triton.trace_parent_id": 0, "triton.request_id": "r1"}
    assert [e.name for e in caller.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    computes = [s for s in receiver.spans if s.name == "compute"
                and s.trace_id.hex() == TRACE_ID]
    caller_compute = [s for s in computes if s.parent_span_id == caller.span_id][0]
    assert [e.name for e in caller_compute.events] == ["COMPUTE_START", "COMPUTE_END"]
    callee = spans["callee"]
    assert callee.parent_span_id == caller_compute.span_id  # the BLS call, under compute
    assert _attributes(callee)["triton.trace_parent_id"] == \
        _attributes(caller)["triton.trace_id"]
    assert [s for s in computes if s.parent_span_id == callee.span_id]
    assert caller.start_time_unix_nano <= caller_compute.start_time_unix_nano \
        <= callee.start_time_unix_nano <= callee.end_time_unix_nano \
        <= caller_compute.end_time_unix_nano <= caller.end_time_unix_nano
    # each model sees its own span as Triton's JSON context
    assert own == {"traceparent": f"00-{TRACE_ID}-{caller.span_id.hex()}-01"}
    assert child == {"traceparent": f"00-{TRACE_ID}-{callee.span_id.hex()}-01"}
    grpc_root = [s for s in receiver.spans if s.name == "InferRequest"
                 and s.trace_id.hex() == grpc_trace][0]
    assert grpc_root.parent_span_id.hex() == "b7ad6b7169203331"
    assert g_own["traceparent"].startswith(f"00-{grpc_trace}-")
    assert len({s.trace_id for s in receiver.spans if s.name == "InferRequest"}) == 3


def test_rate_zero_traces_only_requests_with_a_traceparent(repo, receiver):
    args = ["--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=0", "--trace-config", f"opentelemetry,url={receiver.url}"]
    with running_server(repo, args=args) as server:
        client = server.http_client()
        assert _infer(client, httpclient, {}) == (None, None)  # not traced: no context
        own, _ = _infer(client, httpclient, {"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"})
        generate_trace = "0af7651916cd43dd8448eb211c80319c"
        request = urllib.request.Request(
            f"http://{server.http_url}/v2/models/caller/generate", data=b'{"IN": 1.0}',
            headers={"traceparent": f"00-{generate_trace}-{CLIENT_SPAN}-01"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            context = json.loads(json.loads(reply.read())["CONTEXT"])
    assert own["traceparent"].startswith(f"00-{TRACE_ID}-")
    assert context["traceparent"].startswith(f"00-{generate_trace}-")
    assert {s.trace_id.hex() for s in receiver.spans} == {TRACE_ID, generate_trace}


def test_a_bls_call_made_with_the_trace_is_its_child_in_mode_triton(repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    args = ["--trace-config", f"triton,file={trace_file}", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1"]
    with running_server(repo, args=args) as server:
        # mode triton has no OpenTelemetry context for the model
        assert _infer(server.http_client(), httpclient, {}) == (None, None)
    models = {r["model_name"]: r for r in json.loads(trace_file.read_text())
              if "model_name" in r}
    assert models["callee"]["parent_id"] == models["caller"]["id"] != 0
    assert models["caller"]["parent_id"] == 0
