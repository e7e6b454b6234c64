"""The line each request gets at `--log-verbose 1` (and above), in tritonserver's words:

    HTTP request: 2 /v2/models/simple/infer
    Process for ModelInferHandler, rpc_ok=1, 3 step START

HTTP's number is the method as libevhtp numbers it (0 GET, 1 HEAD, 2 POST, 3 PUT, 4
DELETE, ...), the path without its query. gRPC's name is Triton's handler's: the RPC's
name, `ModelInferHandler` and `ModelStreamInferHandler` for inference; the number counts
that RPC's calls. The callers check `SERVER_LOG.verbose` first: at level 0 a request
costs that one check.
"""

from __future__ import annotations

import itertools
import logging

_http_log = logging.getLogger("pbserve.http")
_grpc_log = logging.getLogger("pbserve.grpc")

# libevhtp's htp_method, which Triton's line prints as a number
_EVHTP_METHODS = {m.encode(): i for i, m in enumerate((
    "GET", "HEAD", "POST", "PUT", "DELETE", "MKCOL", "COPY", "MOVE", "OPTIONS",
    "PROPFIND", "PROPPATCH", "LOCK", "UNLOCK", "TRACE", "CONNECT", "PATCH"))}
_EVHTP_UNKNOWN = 16
_GRPC_HANDLERS = {"ModelInfer": "ModelInferHandler",
                  "ModelStreamInfer": "ModelStreamInferHandler"}
_grpc_calls: dict[str, itertools.count] = {}


def http_request(method: bytes, path: str) -> None:
    _http_log.debug("HTTP request: %d %s", _EVHTP_METHODS.get(method, _EVHTP_UNKNOWN), path)


def grpc_call(rpc: str) -> None:
    """`rpc`: the method's name ("ModelInfer", "ServerLive", ...)."""
    name = _GRPC_HANDLERS.get(rpc, rpc)
    calls = _grpc_calls.get(name)
    if calls is None:
        calls = _grpc_calls[name] = itertools.count()
    _grpc_log.debug("Process for %s, rpc_ok=1, %d step START", name, next(calls))
