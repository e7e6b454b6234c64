"""tritonserver flags pbserve accepts and ignores: each one given is named in a warning.

They configure what only the C++ server has (its memory pools,
SageMaker and Vertex AI frontends, GPU metrics, ...).
"""

from __future__ import annotations

import argparse
import logging

from pbserve.core.config.config_sources import parse_backend_config

log = logging.getLogger("pbserve")

IGNORED = (
    "id", "model-load-retry-count", "enable-peer-access",
    "reuse-http-port", "reuse-grpc-port", "http-header-forward-pattern",
    "grpc-header-forward-pattern", "allow-sagemaker", "sagemaker-port",
    "sagemaker-safe-port-range", "sagemaker-thread-count", "allow-vertex-ai", "vertex-ai-port",
    "vertex-ai-thread-count", "vertex-ai-default-model", "allow-gpu-metrics",
    "cache-directory", "pinned-memory-pool-byte-size", "cuda-virtual-address-size",
    "buffer-manager-thread-count", "repoagent-directory",
)
IGNORED_REPEATABLE = ("metrics-config", "host-policy", "model-load-gpu-limit")
# The --backend-config settings pbserve reads (config_sources.py)
USED_BACKEND_CONFIG = {("python", "default-max-batch-size"), ("python", "shm-default-byte-size"),
                       ("python", "shm-growth-byte-size")}


def add_ignored_flags(flags: argparse._ActionsContainer) -> list[str]:
    """Accept each ignored flag (unless `flags`, a parser or one of its groups, already
    has it), out of --help's list; the flags added (for --help to name)."""
    added = []
    for name in IGNORED + IGNORED_REPEATABLE:
        if f"--{name}" in flags._option_string_actions:
            continue
        flags.add_argument(f"--{name}", default=None, metavar="VALUE",
                           action="append" if name in IGNORED_REPEATABLE else "store",
                           help=argparse.SUPPRESS)
        added.append(f"--{name}")
    return added


def warn_ignored(args: argparse.Namespace) -> list[str]:
    """Log a warning naming each ignored flag the command line set; the warnings."""
    warnings = []
    for name in IGNORED + IGNORED_REPEATABLE:
        if getattr(args, name.replace("-", "_"), None) is not None:
            warnings.append(f"--{name} is accepted for compatibility with tritonserver "
                            f"and ignored by pbserve")
    for backend, settings in parse_backend_config(getattr(args, "backend_config", [])).items():
        for key, value in settings.items():
            if (backend, key) not in USED_BACKEND_CONFIG:
                warnings.append(f"--backend-config {backend},{key}={value} is ignored by "
                                f"pbserve")
    for warning in warnings:
        log.warning("%s", warning)
    return warnings
