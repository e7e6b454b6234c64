"""Triton's OpenTelemetry trace mode through a real server: its spans reach an OTLP/HTTP
receiver the test runs (decoding ExportTraceServiceRequest), under the client's W3C
`traceparent` (HTTP header, gRPC metadata), in the span trees tritonserver 2.51 gives
(docs/tracing.md, recorded with bench/otel_anchor.py): a BLS call beside its caller's
compute span, an ensemble's steps under its span and no compute span of its own, and
the model reads its span's context with `request.trace().get_context()`; in mode
triton the same BLS call is a child record (`parent_id`), and an ensemble's record has
no compute stamps."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from dataclasses import dataclass
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
# An ensemble of three steps: double, double, then callee (its span's context out).
DOUBLE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)])
            for r in requests]
"""
DOUBLE_CONFIG = """name: "double"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""
ENSEMBLE_CONFIG = """name: "ens"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "CONTEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "double" model_version: -1 input_map { key: "IN" value: "IN" }
    output_map { key: "OUT" value: "a" } },
  { model_name: "double" model_version: -1 input_map { key: "IN" value: "a" }
    output_map { key: "OUT" value: "b" } },
  { model_name: "callee" model_version: -1 input_map { key: "IN" value: "b" }
    output_map { key: "CONTEXT" value: "CONTEXT" } } ] }
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


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("otel") / "repo"
    for name, code in (("caller", CALLER), ("callee", CALLEE)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (repo / name / "1" / "model.py").write_text(code)
    (repo / "double" / "1").mkdir(parents=True)
    (repo / "double" / "config.pbtxt").write_text(DOUBLE_CONFIG)
    (repo / "double" / "1" / "model.py").write_text(DOUBLE)
    (repo / "ens" / "1").mkdir(parents=True)
    (repo / "ens" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    return repo


@dataclass
class OtelRun:
    """What one otel-mode server exported for the requests `otel_run` made."""

    spans: list
    resources: list[dict]
    settings: dict
    url: str
    contexts: dict[str, tuple[dict | None, dict | None]]


ENS_TRACE = "5bf92f3577b34da6a3ce929d0e0e4737"
PLAIN_TRACE = "6bf92f3577b34da6a3ce929d0e0e4738"
GRPC_TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture(scope="module")
def otel_run(repo: Path) -> Iterator[OtelRun]:
    """One server in mode opentelemetry: a BLS call over HTTP and gRPC, an untraced-by-
    header request, an ensemble and a plain model; the spans once it has shut down."""
    receiver = Receiver()
    args = ["--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1", "--trace-config", f"opentelemetry,url={receiver.url}",
            "--trace-config", "opentelemetry,resource=service.name=pbserve-test",
            "--trace-config", "opentelemetry,resource=deployment=ci",
            "--trace-config", "opentelemetry,bsp_schedule_delay=50"]
    contexts = {}
    try:
        with running_server(repo, args=args) as server:
            http_client = server.http_client()
            settings = http_client.get_trace_settings()
            parent = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
            contexts["http"] = _infer(http_client, httpclient, {"traceparent": parent})
            contexts["grpc"] = _infer(server.grpc_client(), grpcclient,
                                      {"traceparent": f"00-{GRPC_TRACE}-b7ad6b7169203331-01"})
            _infer(http_client, httpclient, {})  # rate=1: traced too, in a trace of its own
            contexts["ens"] = (_context(http_client, "ens", ENS_TRACE, "e1"), None)
            contexts["plain"] = (_context(http_client, "callee", PLAIN_TRACE, "p1"), None)
        # the server flushed its spans at shutdown
        yield OtelRun(list(receiver.spans), list(receiver.resources), settings,
                      receiver.url, contexts)
    finally:
        receiver.close()


def _infer(client, module, headers: dict[str, str]) -> tuple[dict | None, dict | None]:
    """The caller's and the callee's contexts (None: not traced)."""
    tensor = module.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    result = client.infer("caller", [tensor], request_id="r1", headers=headers)
    own, child = (result.as_numpy(name)[0].decode() for name in ("CONTEXT", "CHILD_CONTEXT"))
    return (json.loads(own) if own else None), (json.loads(child) if child else None)


def _context(client, model: str, trace: str, request_id: str) -> dict:
    """The CONTEXT `model` answers to a request traced under `trace` (HTTP)."""
    tensor = httpclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    result = client.infer(model, [tensor], request_id=request_id,
                          headers={"traceparent": f"00-{trace}-{CLIENT_SPAN}-01"})
    return json.loads(result.as_numpy("CONTEXT")[0].decode())


def _attributes(span) -> dict:
    return {a.key: a.value.string_value or a.value.int_value for a in span.attributes}


def _tree(spans: list, trace: str) -> tuple:
    """The trace's span tree as nested (name, children...) tuples, children in start
    order: `("InferRequest", ("ens", ("double", ("compute",)), ...))`."""
    mine = [s for s in spans if s.trace_id.hex() == trace]
    ids = {s.span_id for s in mine}

    def node(span) -> tuple:
        children = sorted((s for s in mine if s.parent_span_id == span.span_id),
                          key=lambda s: s.start_time_unix_nano)
        return (span.name, *(node(c) for c in children))
    roots = [s for s in mine if s.parent_span_id not in ids]
    assert len(roots) == 1, roots
    return node(roots[0])


def _spans(spans: list, trace: str, name: str) -> list:
    return sorted((s for s in spans if s.trace_id.hex() == trace and s.name == name),
                  key=lambda s: s.start_time_unix_nano)


def test_spans_follow_the_clients_traceparent_and_the_bls_call(otel_run):
    settings, spans = otel_run.settings, otel_run.spans
    assert settings["trace_mode"] == "opentelemetry"
    assert settings["url"] == otel_run.url and "trace_file" not in settings
    assert {"service.name": "pbserve-test", "deployment": "ci"}.items() <= \
        otel_run.resources[0].items()
    # tritonserver 2.51's tree for a Python model's BLS call: beside the caller's compute
    assert _tree(spans, TRACE_ID) == (
        "InferRequest", ("caller", ("compute",), ("callee", ("compute",))))
    root, = _spans(spans, TRACE_ID, "InferRequest")
    assert root.parent_span_id.hex() == CLIENT_SPAN
    caller, = _spans(spans, TRACE_ID, "caller")
    assert _attributes(caller) == {
        "triton.model_name": "caller", "triton.model_version": 1,
        "triton.trace_id": _attributes(caller)["triton.trace_id"],
        "triton.trace_parent_id": 0, "triton.request_id": "r1"}
    assert [e.name for e in caller.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    caller_compute = [s for s in _spans(spans, TRACE_ID, "compute")
                      if s.parent_span_id == caller.span_id][0]
    assert [e.name for e in caller_compute.events] == ["COMPUTE_START", "COMPUTE_END"]
    callee, = _spans(spans, TRACE_ID, "callee")
    assert _attributes(callee)["triton.trace_parent_id"] == \
        _attributes(caller)["triton.trace_id"]
    assert caller.start_time_unix_nano <= caller_compute.start_time_unix_nano \
        <= callee.start_time_unix_nano <= callee.end_time_unix_nano \
        <= caller_compute.end_time_unix_nano <= caller.end_time_unix_nano
    # each model sees its own span as Triton's JSON context
    own, child = otel_run.contexts["http"]
    assert own == {"traceparent": f"00-{TRACE_ID}-{caller.span_id.hex()}-01"}
    assert child == {"traceparent": f"00-{TRACE_ID}-{callee.span_id.hex()}-01"}
    grpc_root, = _spans(spans, GRPC_TRACE, "InferRequest")
    assert grpc_root.parent_span_id.hex() == "b7ad6b7169203331"
    assert otel_run.contexts["grpc"][0]["traceparent"].startswith(f"00-{GRPC_TRACE}-")
    # five traced client requests, one of them with no traceparent: five traces
    assert len({s.trace_id for s in spans if s.name == "InferRequest"}) == 5


def test_an_ensemble_has_no_compute_span_of_its_own(otel_run):
    spans = otel_run.spans
    assert _tree(spans, ENS_TRACE) == (
        "InferRequest", ("ens", ("double", ("compute",)), ("double", ("compute",)),
                         ("callee", ("compute",))))
    ens, = _spans(spans, ENS_TRACE, "ens")
    assert _attributes(ens) == {
        "triton.model_name": "ens", "triton.model_version": 1,
        "triton.trace_id": _attributes(ens)["triton.trace_id"],
        "triton.trace_parent_id": 0, "triton.request_id": "e1"}
    assert [e.name for e in ens.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    steps = _spans(spans, ENS_TRACE, "double") + _spans(spans, ENS_TRACE, "callee")
    for step in steps:  # as Triton: the ensemble's request id, its trace id as parent
        attributes = _attributes(step)
        assert attributes["triton.trace_parent_id"] == _attributes(ens)["triton.trace_id"]
        assert attributes["triton.request_id"] == "e1"
        assert [e.name for e in step.events] == ["REQUEST_START", "QUEUE_START",
                                                 "REQUEST_END"]
        assert ens.start_time_unix_nano <= step.start_time_unix_nano \
            <= step.end_time_unix_nano <= ens.end_time_unix_nano
    callee = steps[-1]
    assert otel_run.contexts["ens"][0] == {
        "traceparent": f"00-{ENS_TRACE}-{callee.span_id.hex()}-01"}


def test_a_plain_models_tree_is_request_model_compute(otel_run):
    assert _tree(otel_run.spans, PLAIN_TRACE) == ("InferRequest", ("callee", ("compute",)))
    callee, = _spans(otel_run.spans, PLAIN_TRACE, "callee")
    compute, = _spans(otel_run.spans, PLAIN_TRACE, "compute")
    assert _attributes(callee)["triton.request_id"] == "p1"
    assert [e.name for e in compute.events] == ["COMPUTE_START", "COMPUTE_END"]


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
        client = server.http_client()
        # mode triton has no OpenTelemetry context for the model
        assert _infer(client, httpclient, {}) == (None, None)
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.array([1.0], dtype=np.float32))
        client.infer("ens", [tensor], request_id="e1")
    records = json.loads(trace_file.read_text())
    heads = [r for r in records if "model_name" in r]
    caller = [r for r in heads if r["model_name"] == "caller"][0]
    callee = [r for r in heads if r["model_name"] == "callee" and r["request_id"] == ""][0]
    assert callee["parent_id"] == caller["id"] != 0
    assert "parent_id" not in caller  # as Triton: written for a child trace only
    ens = [r for r in heads if r["model_name"] == "ens"][0]
    assert "parent_id" not in ens
    assert sorted(r["model_name"] for r in heads if r.get("parent_id") == ens["id"]) == \
        ["callee", "double", "double"]

    def stamps(trace_id: int) -> list[str]:
        return [t["name"] for r in records if r["id"] == trace_id
                for t in r.get("timestamps", ())]
    # an ensemble executes nothing itself: no compute stamps (Triton's records)
    assert stamps(ens["id"]) == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert stamps(caller["id"]) == ["REQUEST_START", "QUEUE_START", "COMPUTE_START",
                                    "COMPUTE_END", "REQUEST_END"]
