"""The sockets of the endpoints the --allow-* flags ask for, bound before anything
loads (listener.py) in tritonserver's order (GRPC, HTTP, Metrics: the first that cannot
be bound is the one named); app.py's `start_servers` hands them to the servers."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from pbserve.server.listener import Listener


@dataclass
class Endpoints:
    """One Listener per endpoint asked for (None: --allow-<endpoint>=false)."""

    grpc: Listener | None = None
    http: Listener | None = None
    metrics: Listener | None = None

    @classmethod
    def bind(cls, args: argparse.Namespace) -> Endpoints:
        """Bind each endpoint's address; BindError for the first that cannot be, with
        those bound before it closed."""
        endpoints = cls()
        try:
            if args.allow_grpc:
                endpoints.grpc = Listener.bind("GRPC", args.grpc_address, args.grpc_port)
            if args.allow_http:
                endpoints.http = Listener.bind("HTTP", args.http_address, args.http_port)
            if args.allow_metrics:
                endpoints.metrics = Listener.bind("Metrics", args.metrics_address,
                                                  args.metrics_port)
        except BaseException:
            endpoints.close()
            raise
        return endpoints

    def close(self) -> None:
        """Close the sockets no server took."""
        for listener in (self.grpc, self.http, self.metrics):
            if listener is not None:
                listener.close()
