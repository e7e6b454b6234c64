"""Run one bare echo: `python bench/grpc_echo/serve.py TRANSPORT PORT` (until killed)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))
APP = "grpc_echo.asgi_app:app"
PBSERVE_APP = "grpc_echo.pbserve_asgi:app"  # pbserve's core behind an ASGI gRPC adapter
PBSERVE_REPO = "/work/shared/perf/anchor_models"


def _hypercorn(port: int) -> None:
    import asyncio

    import uvloop
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    from grpc_echo.asgi_app import app

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    config.h2_max_inbound_frame_size = 2**24 - 1
    config.keep_alive_max_requests = 2**62  # else a GOAWAY after 1000 calls
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(serve(app, config))


def _uvicorn(port: int, app: str = APP, lifespan: str = "off") -> None:
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=port, http="zttp", http2=True, loop="uvloop",
                log_level="warning", access_log=False, lifespan=lifespan)


def _granian(port: int) -> None:
    from granian import Granian

    Granian(APP, address="127.0.0.1", port=port, interface="asgi", http="2", loop="uvloop",
            workers=1, runtime_threads=1, log_enabled=False).serve()


def _pyvoy(port: int, app: str = APP, lifespan: str = "--no-lifespan") -> None:
    env = dict(os.environ, PYTHONPATH=str(BENCH))
    pyvoy = Path(sys.executable).with_name("pyvoy")
    os.execve(pyvoy, [str(pyvoy), app, "--address", "127.0.0.1", "--port", str(port),
                      lifespan, "--log-level", "error", "--loop", "uvloop"], env)


def _pbserve(port: int, transport: str = "zttp") -> None:
    """The real pbserve (on its gRPC transport `transport`) on the anchor models."""
    pbserve = Path(sys.executable).with_name("pbserve")
    os.execv(pbserve, [str(pbserve), "--model-repository", PBSERVE_REPO,
                       "--grpc-address", "127.0.0.1", "--grpc-port", str(port),
                       "--grpc-transport", transport,
                       "--allow-http", "false", "--allow-metrics", "false"])


def main() -> None:
    transport, port = sys.argv[1], int(sys.argv[2])
    if transport == "grpcio-aio":
        from grpc_echo.grpcio_servers import serve_aio as serve
    elif transport == "grpcio-aio-asyncio":
        from grpc_echo.grpcio_servers import serve_aio_asyncio as serve
    elif transport == "grpcio-sync":
        from grpc_echo.grpcio_servers import serve_sync as serve
    elif transport == "grpclib":
        from grpc_echo.grpclib_server import serve
    elif transport == "h2":
        from grpc_echo.h2_server import serve
    elif transport == "zttp":
        from grpc_echo.zttp_server import serve
    else:
        serve = {"hypercorn": _hypercorn, "uvicorn-zttp": _uvicorn, "granian": _granian,
                 "pyvoy": _pyvoy, "pbserve": _pbserve,
                 "pbserve-grpcio": lambda port: _pbserve(port, "grpcio"),
                 "pbserve-pyvoy": lambda port: _pyvoy(port, PBSERVE_APP, "--lifespan"),
                 "pbserve-uvicorn-zttp": lambda port: _uvicorn(port, PBSERVE_APP, "on"),
                 }[transport]
    serve(port)


if __name__ == "__main__":
    main()
