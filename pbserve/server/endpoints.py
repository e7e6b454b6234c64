"""The sockets of the endpoints the --allow-* flags ask for, bound before anything
loads (listener.py) in tritonserver's order (GRPC, HTTP, Metrics: the first that cannot
be bound is the one named); app.py's `start_servers` hands them to the servers."""

from __future__ import annotations

from dataclasses import dataclass

from pbserve.server.listener import Listener
from pbserve.server.options import FrontendOptions


@dataclass
class Endpoints:
    """One Listener per endpoint asked for (None: --allow-<endpoint>=false)."""

    grpc: Listener | None = None
    http: Listener | None = None
    metrics: Listener | None = None
    openai: Listener | None = None  # --openai-port: served by the core's process alone

    @classmethod
    def bind(cls, options: FrontendOptions) -> Endpoints:
        """Bind each endpoint's address; BindError for the first that cannot be, with
        those bound before it closed."""
        endpoints = cls()
        try:
            for name, endpoint in (("GRPC", options.grpc), ("HTTP", options.http),
                                   ("Metrics", options.metrics)):
                if endpoint.enabled:
                    setattr(endpoints, name.lower(), Listener.bind(
                        name, endpoint.address, endpoint.port))
            if options.openai is not None:
                endpoints.openai = Listener.bind("OpenAI", options.openai.address,
                                                 options.openai.port)
        except BaseException:
            endpoints.close()
            raise
        return endpoints

    def close(self) -> None:
        """Close the sockets no server took."""
        for listener in (self.grpc, self.http, self.metrics, self.openai):
            if listener is not None:
                listener.close()
