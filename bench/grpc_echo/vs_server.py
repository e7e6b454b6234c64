"""A bare echo as a server `../shared/perf/vs.py` can start, so that the transport's own
figure on a gRPC row comes from the yardstick's own harness, beside pbserve:

    python3 ../shared/perf/vs.py --a pbserve --b 'python bench/grpc_echo/vs_server.py grpcio-aio' \\
        --b-name grpcio-echo --rows gRPC

It takes tritonserver's flags as vs.py passes them, serves the echo of TRANSPORT
(serve.py's echoes: grpcio-aio, grpcio-aio-asyncio, grpcio-sync, zttp) on --grpc-port,
and answers vs.py's readiness probes (`/v2/health/ready`, `/v2/models/NAME/ready`) on
--http-port from a thread; everything else on that port is 404. The echo answers no
statistics, so vs.py's srv-inf column is "-" for it.
"""

from __future__ import annotations

import argparse
import http.server
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


_GRPC_URL: list[str] = []


def _grpc_ready() -> bool:
    """Whether the echo on --grpc-port answers ServerReady yet (the probes get 404 until
    it does)."""
    import tritonclient.grpc as grpcclient

    try:
        return grpcclient.InferenceServerClient(_GRPC_URL[0]).is_server_ready()
    except Exception:  # noqa: BLE001 - not up yet
        return False


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        ok = self.path == "/v2/health/ready" or (
            self.path.startswith("/v2/models/") and self.path.endswith("/ready"))
        ok = ok and _grpc_ready()
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("transport")
    ap.add_argument("--grpc-port", type=int, required=True)
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--model-repository")  # vs.py passes one; the echo has its own model
    args, _ = ap.parse_known_args()  # the rest of tritonserver's flags mean nothing here
    _GRPC_URL.append(f"127.0.0.1:{args.grpc_port}")
    ready = http.server.HTTPServer(("127.0.0.1", args.http_port), _Ready)
    threading.Thread(target=ready.serve_forever, daemon=True).start()
    sys.argv = [sys.argv[0], args.transport, str(args.grpc_port)]
    from grpc_echo.serve import main as serve

    serve()


if __name__ == "__main__":
    main()
