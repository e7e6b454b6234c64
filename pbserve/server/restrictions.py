"""Restricted APIs: tritonserver's `--http-restricted-api` and `--grpc-restricted-protocol`.

    --http-restricted-api=<api>[,<api>...]:<key>=<value>        (repeatable)
    --grpc-restricted-protocol=<protocol>[,...]:<key>=<value>   (repeatable)

A request to a restricted group must carry the header `<key>` (gRPC: the metadata key
`triton-grpc-protocol-<key>`) with exactly `<value>`; otherwise it is refused, with
Triton's answers: HTTP 403 `This API is restricted, expecting header '<key>'`, gRPC
UNAVAILABLE `This protocol is restricted, expecting header '<full key>'`. Group names
and the endpoints they cover are Triton's (`CATEGORIES`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CATEGORIES = ("health", "metadata", "inference", "shared-memory", "model-config",
              "model-repository", "statistics", "trace", "logging")
GRPC_KEY_PREFIX = "triton-grpc-protocol-"

# Each gRPC method's group, as Triton's gRPC server assigns them.
GRPC_CATEGORIES = {
    "ServerLive": "health", "ServerReady": "health", "ModelReady": "health",
    "ServerMetadata": "metadata", "ModelMetadata": "metadata",
    "ModelInfer": "inference", "ModelStreamInfer": "inference",
    "ModelConfig": "model-config", "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository", "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory", "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory", "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace", "LogSettings": "logging",
}
# The HTTP endpoints of a model, by what follows /v2/models/<m>[/versions/<v>].
_MODEL_CATEGORIES = {"": "metadata", "ready": "health", "config": "model-config",
                     "stats": "statistics", "infer": "inference", "generate": "inference",
                     "generate_stream": "inference", "trace": "trace"}
_TOP_CATEGORIES = {"health": "health", "repository": "model-repository",
                   "systemsharedmemory": "shared-memory", "cudasharedmemory": "shared-memory",
                   "trace": "trace", "logging": "logging"}


@dataclass(frozen=True)
class Restriction:
    """The header (gRPC: metadata key) a request must carry, and its value."""

    key: str
    value: str


def parse(options: Sequence[str], flag: str, key_prefix: str = "",
          kind: str = "api") -> dict[str, Restriction]:
    """Flag values -> the restriction of each restricted group; ValueError with Triton's
    message for a malformed value, an unknown group or a group named twice."""
    restrictions: dict[str, Restriction] = {}
    for option in options:
        names, colon, setting = option.partition(":")
        key, equals, value = setting.partition("=")
        if not (colon and equals and names and key and value):
            raise ValueError(f"--{flag} option format is '<config name>:<setting>=<value>'. "
                             f"Got {option}")
        for name in names.split(","):
            if name not in CATEGORIES:
                raise ValueError(f"unknown restricted {kind} '{name}'")
            if name in restrictions:
                raise ValueError(f"restricted {kind} '{name}' can not be specified in "
                                 f"multiple config groups")
            restrictions[name] = Restriction(key_prefix + key, value)
    return restrictions


def http_category(parts: list[str]) -> str | None:
    """The group of an HTTP path, split on "/" ("", "v2", ...); None: no group."""
    if len(parts) == 2:
        return "metadata"
    if parts[2] != "models":
        return _TOP_CATEGORIES.get(parts[2])
    if len(parts) < 4:
        return None
    if len(parts) == 4 and parts[3] == "stats":
        return "statistics"
    rest = parts[4:]
    if rest[:1] == ["versions"]:
        rest = rest[2:]
    return _MODEL_CATEGORIES.get(rest[0] if rest else "")


def http_refusal(restriction: Restriction, headers: dict[bytes, bytes]) -> str | None:
    """Why a request with `headers` (lower-cased names) may not pass; None if it may."""
    if headers.get(restriction.key.lower().encode()) == restriction.value.encode():
        return None
    return f"This API is restricted, expecting header '{restriction.key}'"


def grpc_refusal(restriction: Restriction, metadata: Sequence[tuple[str, object]] | None
                 ) -> str | None:
    """Why a call with `metadata` may not pass; None if it may."""
    wanted = restriction.key.lower()  # gRPC (HTTP/2) metadata keys are lower case
    for key, value in metadata or ():
        if key == wanted and value == restriction.value:
            return None
    return f"This protocol is restricted, expecting header '{restriction.key}'"
