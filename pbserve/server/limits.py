"""What bounds both endpoints alike: the tensor data of one request."""

from __future__ import annotations

# Triton's HTTP_DEFAULT_MAX_INPUT_SIZE (--http-max-input-size), which bounds a gRPC
# message too (grpc/server.py).
DEFAULT_MAX_INPUT_SIZE = 1 << 26  # 64 MiB
