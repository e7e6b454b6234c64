"""The server's options: one frozen object the command line builds (pbserve/cli/) and
app.py hands down, part by part: the core's (`CoreOptions`) to the model manager, the
frontends' to the HTTP, gRPC and metrics servers, the request plane's to its node.
Nothing below reads a flag any other way. (Logging and tracing are process-wide by
nature, as Python's logging is: the command line installs them, log_settings.py and
tracing.py; `/v2/logging` and `/v2/trace/setting` change them later.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pbserve.core.config.config_sources import ConfigSources
from pbserve.core.options import CoreOptions
from pbserve.server.options import FrontendOptions

if TYPE_CHECKING:  # the plane imports nats: only with --request-plane
    from pbserve.distributed.node import DataPlaneSettings
    from pbserve.distributed.request_plane import ConnectionOptions


@dataclass(frozen=True)
class PlaneOptions:
    """`--request-plane` and its flags."""

    url: str
    heartbeat_s: float
    worker_name: str
    connection: ConnectionOptions
    data_plane: DataPlaneSettings


@dataclass(frozen=True)
class ServerOptions:
    repositories: tuple[str, ...]  # --model-repository, cloud ones as given
    core: CoreOptions
    config_sources: ConfigSources  # --model-config-defaults, --backend-config, ...
    frontends: FrontendOptions
    plane: PlaneOptions | None = None  # None: no --request-plane
    exit_timeout_s: float = 30.0  # --exit-timeout-secs
    exit_on_error: bool = True  # --exit-on-error
    frontend_processes: int = 1  # --frontend-processes (1: HTTP and gRPC in this process)
    command_line: tuple[str, ...] = ()  # the flags, as frontend processes parse them
