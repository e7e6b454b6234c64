"""What the server's core takes from the command line: one frozen object, built once.

The command line (pbserve/cli/options.py) builds a `CoreOptions` from the flags and the
manager takes it whole; nothing in the core reads a flag any other way (no process-wide
setters, no attributes assigned after construction). Tests and embedders build one with
the defaults they need: `CoreOptions(control_mode="explicit", strict_readiness=False)`.
The defaults are tritonserver's, where it has the flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pbserve.core.cache.cache_config import CacheSettings
from pbserve.core.instances.model_debug import ModelDebug
from pbserve.core.instances.outage import RESTART_WAIT_S
from pbserve.core.observability.cpu_metrics import DEFAULT_INTERVAL_MS
from pbserve.errors import invalid_arg
from pbserve.model_backends import DEFAULT_BACKEND_DIRECTORY

CONTROL_MODES = ("none", "explicit", "poll")


@dataclass(frozen=True)
class RateLimit:
    """`--rate-limit` and its `--rate-limit-resource`s (name, count, device)."""

    mode: str = "off"  # "execution_count" or "off"
    resources: tuple[tuple[str, int, int], ...] = ()

    @property
    def on(self) -> bool:
        return self.mode == "execution_count"


@dataclass(frozen=True)
class CoreOptions:
    """The model manager's options (tritonserver's flag names in the comments)."""

    control_mode: str = "none"  # --model-control-mode
    startup_models: tuple[str, ...] = ()  # --load-model
    auto_complete: bool = True  # not --disable-auto-complete-config
    poll_secs: float = 15.0  # --repository-poll-secs
    allow_client_shm: bool = True  # pbserve's --allow-client-shm
    restart_wait_s: float = RESTART_WAIT_S  # pbserve's --restart-wait-secs
    model_namespacing: bool = False  # --model-namespacing
    strict_readiness: bool = True  # --strict-readiness
    load_thread_count: int = 4  # --model-load-thread-count
    stub_zygote: bool = True  # pbserve's --stub-zygote
    response_cache: CacheSettings | None = None  # --cache-config; None: no cache
    backend_directory: Path = Path(DEFAULT_BACKEND_DIRECTORY)  # --backend-directory
    model_debug: ModelDebug = field(default_factory=ModelDebug)
    rate_limit: RateLimit = field(default_factory=RateLimit)
    cpu_metrics: bool = True  # --allow-cpu-metrics (and --allow-metrics)
    metrics_interval_ms: int = DEFAULT_INTERVAL_MS  # --metrics-interval-ms

    def __post_init__(self) -> None:
        if self.control_mode not in CONTROL_MODES:
            raise invalid_arg(f"unsupported model control mode '{self.control_mode}'")
        if self.metrics_interval_ms < 1:
            raise invalid_arg(f"--metrics-interval-ms must be at least 1, got "
                              f"{self.metrics_interval_ms}")
