"""One frontend process of a server started with `--frontend-processes N`
(pbserve/frontends/processes.py starts it):

    python -m pbserve.cli.frontend_process --channel SPEC --index I --parent-pid P \
        --listen L --connections FD -- ARGS

ARGS is the server's own command line, parsed here the same way (logging, tracing, the
HTTP and gRPC options); L names the inherited listening sockets (`http=FD:FD;grpc=FD`),
FD the frontends' connection counts (frontends/connection_counts.py).
It serves HTTP and gRPC on them with a LinkedCore (frontends/linked_core.py) until
SIGTERM (the core's; SIGINT is left to the core), then stops as a server does
(shutdown.py), or dies with the core.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys

from pbserve.cli.parser import build_parser
from pbserve.cli.settings import configure_logging, server_options
from pbserve.cli.trace_flags import configure_tracing
from pbserve.exit_signals import ShutdownSignals
from pbserve.frontends.channel import ChannelSpec, FrontendEnd
from pbserve.frontends.connection_counts import ConnectionCounts, SlotGate
from pbserve.frontends.linked_core import LinkedCore
from pbserve.options import ServerOptions
from pbserve.server.endpoints import Endpoints
from pbserve.server.listener import Listener
from pbserve.server.start import start_servers
from pbserve.shutdown import Frontend, shut_down, shutdown_deadline
from shm import Pool
from stub.parent_death import die_with_parent

log = logging.getLogger("pbserve")


def _listeners(text: str, options: ServerOptions, gate: SlotGate) -> Endpoints:
    """The core's sockets, inherited: every frontend accepts on them, through `gate`
    (server/gated_accept.py)."""
    endpoints = Endpoints()
    for item in filter(None, text.split(";")):
        name, fds = item.split("=", 1)
        endpoint = getattr(options.frontends, name)
        sockets = [socket.socket(fileno=int(fd)) for fd in fds.split(":")]
        for sock in sockets:
            sock.setblocking(False)
        listener = Listener(name.upper(), endpoint.address, endpoint.port, sockets)
        listener.gate = gate
        setattr(endpoints, name, listener)
    return endpoints


async def _serve(spec: ChannelSpec, index: int, endpoints: Endpoints, gate: SlotGate,
                 options: ServerOptions) -> int:
    sizes = options.config_sources.shm_sizes
    core = LinkedCore(FrontendEnd.attach(spec), Pool(spec.prefix + "-p", sizes.default,
                                                      sizes.growth), index)
    core.start()
    signals = ShutdownSignals(asyncio.get_running_loop(),
                              shutdown_deadline(options.exit_timeout_s))
    # Ctrl-C reaches the whole process group: the core decides, and stops this process
    # with SIGTERM once it is its turn (a second signal here would cut its requests off).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signals.install((signal.SIGTERM,))
    servers: list[Frontend] = []
    try:
        await start_servers(core, options.frontends, servers, endpoints)
        gate.serving()
        core.serving()
        await signals.received.wait()
    finally:
        gate.stopped()  # the others take the new connections while this one drains
        await shut_down(servers, None, options.exit_timeout_s)
        signals.cancel()
        core.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pbserve.cli.frontend_process")
    parser.add_argument("--channel", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--listen", default="")
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("server_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    die_with_parent(args.parent_pid)
    server_args = args.server_args[1:] if args.server_args[:1] == ["--"] \
        else args.server_args
    flags = build_parser().parse_args(server_args)
    configure_logging(flags)
    configure_tracing(flags)
    options = server_options(flags)
    gate = ConnectionCounts.attach(args.connections).gate(args.index)
    endpoints = _listeners(args.listen, options, gate)
    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(
            _serve(ChannelSpec.parse(args.channel), args.index, endpoints, gate, options))
    finally:
        endpoints.close()
        loop.close()


if __name__ == "__main__":
    sys.exit(main())
