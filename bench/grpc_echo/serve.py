"""Run one server: `python bench/grpc_echo/serve.py TRANSPORT PORT` (until killed).

TRANSPORT: a bare echo, `grpcio-aio` (grpc.aio on uvloop), `grpcio-aio-asyncio` (on
asyncio's loop), `grpcio-sync` (a thread pool) or `zttp`; or the real pbserve on
$PBSERVE_REPO (a repository with `identity_fp32`, such as the anchor models), `pbserve`
(on its default gRPC transport, zttp) or `pbserve-grpcio`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _pbserve(port: int, transport: str = "zttp") -> None:
    """The real pbserve (on its gRPC transport `transport`) on $PBSERVE_REPO."""
    repo = os.environ.get("PBSERVE_REPO")
    if not repo:
        sys.exit("pbserve transports need $PBSERVE_REPO: a model repository with "
                 "identity_fp32")
    pbserve = Path(sys.executable).with_name("pbserve")
    os.execv(pbserve, [str(pbserve), "--model-repository", repo,
                       "--grpc-address", "127.0.0.1", "--grpc-port", str(port),
                       "--grpc-transport", transport,
                       "--allow-http", "false", "--allow-metrics", "false"])


def server(transport: str) -> Callable[[int], None]:
    """The function that serves `transport` on a port (KeyError for an unknown one)."""
    if transport.startswith("grpcio-"):
        from grpc_echo import grpcio_servers

        return {"grpcio-aio": grpcio_servers.serve_aio,
                "grpcio-aio-asyncio": grpcio_servers.serve_aio_asyncio,
                "grpcio-sync": grpcio_servers.serve_sync}[transport]
    if transport == "zttp":
        from grpc_echo.zttp_server import serve

        return serve
    return {"pbserve": _pbserve,
            "pbserve-grpcio": lambda port: _pbserve(port, "grpcio")}[transport]


def main() -> None:
    transport, port = sys.argv[1], int(sys.argv[2])
    server(transport)(port)


if __name__ == "__main__":
    main()
