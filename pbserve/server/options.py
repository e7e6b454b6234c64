"""What the HTTP, gRPC and metrics servers take from the command line: part of the
server's options (pbserve/options.py), built by pbserve/cli/settings.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from pbserve.server.grpc.h2.limits import GrpcLimits
from pbserve.server.http.limits import HttpLimits
from pbserve.server.openai.options import OpenAIOptions
from pbserve.server.tls import TlsConfig


@dataclass(frozen=True)
class EndpointOptions:
    """One listening service: `--allow-<name>`, `--<name>-address`, `--<name>-port`."""

    enabled: bool
    address: str
    port: int


@dataclass(frozen=True)
class FrontendOptions:
    """What the HTTP, gRPC, metrics and OpenAI servers take."""

    http: EndpointOptions
    grpc: EndpointOptions
    metrics: EndpointOptions
    http_limits: HttpLimits
    http_tls: TlsConfig | None = None
    grpc_tls: TlsConfig | None = None
    http_restricted: dict = field(default_factory=dict)
    grpc_restricted: dict = field(default_factory=dict)
    grpc_transport: str = "zttp"
    grpc_limits: GrpcLimits = GrpcLimits()  # the zttp transport's
    openai: OpenAIOptions | None = None  # --openai-port (None: no OpenAI endpoint)

    @property
    def max_input_size(self) -> int:
        """--http-max-input-size, which bounds gRPC messages too."""
        return self.http_limits.max_input_size
