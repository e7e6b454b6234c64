"""The OpenTelemetry span trees of tritonserver 2.51 and of pbserve, side by side.

    python bench/otel_anchor.py            # both (Triton from /tmp/anchor-venv)
    python bench/otel_anchor.py --only pbserve

Each server runs in mode opentelemetry (rate=1, level=TIMESTAMPS) exporting to an
OTLP/HTTP receiver this script runs, on the same repository: an ensemble of three Python
steps (add1, add2, add1), a plain model (add1) and a BLS model (bls calls add1 with
`trace=request.trace()`). The requests: each of the three over HTTP with a request id,
the ensemble over HTTP under a client `traceparent`, the ensemble over gRPC. The trees
(span names, children in start order, attributes, event names) are what docs/tracing.md
shows. tritonserver exports OTLP/JSON (opentelemetry-cpp 1.13), pbserve OTLP/protobuf.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_anchor import anchor_env, running_triton  # noqa: E402

from pbserve.testing import running_server  # noqa: E402

STEP = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + {add})])
            for r in requests]
"""
BLS = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            reply = pb_utils.InferenceRequest(
                model_name="add1", inputs=[pb_utils.get_input_tensor_by_name(r, "IN")],
                requested_output_names=["OUT"], trace=r.trace()).exec()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.get_output_tensor_by_name(reply, "OUT")]))
        return out
"""
IO = """input [ { name: "IN", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""
STEPS = [("add1", "IN", "a"), ("add2", "a", "b"), ("add1", "b", "OUT")]
ENSEMBLE = ('name: "ens"\nplatform: "ensemble"\nmax_batch_size: 0\n' + IO
            + "ensemble_scheduling { step [\n" + ",\n".join(
                f'  {{ model_name: "{m}" model_version: -1 input_map {{ key: "IN" '
                f'value: "{i}" }} output_map {{ key: "OUT" value: "{o}" }} }}'
                for m, i, o in STEPS) + " ] }\n")
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def write_repo(repo: Path) -> None:
    for name, code in (("add1", STEP.format(add=1)), ("add2", STEP.format(add=2)),
                       ("bls", BLS)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n' + IO)
        (repo / name / "1" / "model.py").write_text(code)
    (repo / "ens" / "1").mkdir(parents=True)
    (repo / "ens" / "config.pbtxt").write_text(ENSEMBLE)


class Receiver:
    """OTLP/HTTP on 127.0.0.1: the spans of every POST, as dicts (OTLP/JSON's names)."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        spans = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                spans.extend(_decode(self.headers.get("Content-Type", ""), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _decode(content_type: str, body: bytes) -> list[dict]:
    if "json" in content_type:
        doc = json.loads(body)
    else:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest)
        doc = MessageToDict(ExportTraceServiceRequest.FromString(body))
    spans = [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    for span in spans:  # protobuf's JSON mapping writes ids in base64, OTLP/JSON in hex
        for key in ("traceId", "spanId", "parentSpanId"):
            if span.get(key) and "json" not in content_type:
                span[key] = base64.b64decode(span[key]).hex()
    return spans


def drive(http_url: str, grpc_url: str) -> None:
    """The requests whose trees are compared."""
    client = httpclient.InferenceServerClient(http_url)
    for model in ("ens", "add1", "bls"):
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.array([1.0], np.float32))
        client.infer(model, [tensor], request_id=f"req-{model}")
    client.infer("ens", [tensor],
                 headers={"traceparent": f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"})
    g = grpcclient.InferenceServerClient(grpc_url)
    tensor = grpcclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.0], np.float32))
    g.infer("ens", [tensor], request_id="grpc-ens")


def trees(spans: list[dict]) -> list[str]:
    """One indented tree per trace, roots in start order."""
    ids = {s["spanId"] for s in spans}
    lines: list[str] = []

    def show(span: dict, depth: int) -> None:
        attributes = {a["key"]: next(iter(a["value"].values()))
                      for a in span.get("attributes", ())}
        attributes.pop("triton.trace_id", None)  # numbering differs between the servers
        attributes.pop("triton.trace_parent_id", None)
        events = ",".join(e["name"] for e in span.get("events", ()))
        lines.append(f"{'  ' * depth}{span['name']} {attributes or ''} [{events}]")
        for child in sorted((s for s in spans if s.get("parentSpanId") == span["spanId"]),
                            key=lambda s: int(s["startTimeUnixNano"])):
            show(child, depth + 1)
    roots = [s for s in spans if s.get("parentSpanId", "") not in ids]
    for root in sorted(roots, key=lambda s: int(s["startTimeUnixNano"])):
        lines.append(f"trace (parent span {root.get('parentSpanId') or '-'})")
        show(root, 1)
    return lines


def run(server: str, repo: Path) -> list[str]:
    receiver = Receiver()
    args = ["--trace-config", "mode=opentelemetry", "--trace-config", "rate=1",
            "--trace-config", "level=TIMESTAMPS",
            "--trace-config", f"opentelemetry,url={receiver.url}"]
    try:
        if server == "triton":
            env = anchor_env(("TRITON_BIN",))
            if env is None:
                raise SystemExit("no tritonserver: bash ../shared/perf/setup_anchor.sh")
            with running_triton(repo, env, args) as (grpc_url, http_url):
                drive(http_url, grpc_url)
                time.sleep(6.5)  # Triton's batch processor exports every 5 s
        else:
            with running_server(repo, args=args) as srv:
                drive(srv.http_url, srv.grpc_url)
        return trees(receiver.spans)
    finally:
        receiver.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("triton", "pbserve"))
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        write_repo(repo)
        for server in ("triton", "pbserve"):
            if options.only in (None, server):
                print(f"== {server}")
                print("\n".join(run(server, repo)))


if __name__ == "__main__":
    main()
