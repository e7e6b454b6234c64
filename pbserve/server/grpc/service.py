"""The GRPCInferenceService RPCs, mapped onto the InferenceCore.

Errors are Triton's: a `ServerError` ends the call with the gRPC status of its code and
its message; anything unexpected is INTERNAL (and logged). Beyond the KServe v2 core
RPCs and the repository extension:
* ModelStatistics answers in Triton's shape (the core's figures, or zeros: see
  `server/statistics.py`), as perf_analyzer asks for it;
* system shared memory (grpc/shm.py); CUDA shared memory lists no regions and
  registering one is refused;
* LogSettings (grpc/logging.py), TraceSetting (grpc/trace.py).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc.service_pb2_grpc import GRPCInferenceServiceServicer

from pbserve.core.api import InferenceCore
from pbserve.core.config.model_config import config_from_dict
from pbserve.core.types import InferRequest, InferResponse
from pbserve.core.observability.log_settings import SERVER_LOG
from pbserve.core.observability.tracing import TRACER
from pbserve.errors import ErrorCode, MalformedRequest, ServerError
from pbserve.server.grpc import logging as grpc_logging
from pbserve.server.grpc import shm as grpc_shm
from pbserve.server.grpc import trace as grpc_trace
from pbserve.server.error_log import ErrorLog
from pbserve.server import request_log, statistics, trace_context
from pbserve.server.inference import UnaryInfer
from pbserve.server.grpc.codec import (
    RequestOptions,
    decode_infer_request,
    encode_infer_response_bytes,
    encode_response_header,
    model_version,
)
from pbserve.server.grpc.handlers import abort
from pbserve.server.grpc.stream import MAX_IN_FLIGHT, StreamSession
from pbserve.server.grpc.wire import (
    ResponseParts,
    SplitRequest,
    infer_response_parts,
    parse_infer_request,
)

log = logging.getLogger("pbserve.grpc")


class _ModelInfer(UnaryInfer):
    """ModelInfer's side of the unary request path (server/inference.py): the message
    decoded by grpc/codec.py."""

    __slots__ = ()

    decoupled_message = ("ModelInfer RPC doesn't support models with decoupled "
                         "transaction policy")

    def decode(self, model: str, version: str, message: pb.ModelInferRequest,
               contents: list[Any] | None, placed: list[Any] | None
               ) -> tuple[InferRequest, RequestOptions]:
        return decode_infer_request(message, version, contents, placed)


def _unsupported(what: str) -> ServerError:
    return ServerError(ErrorCode.UNSUPPORTED, f"{what} is not supported by pbserve")


def _refuse_repository_name(name: str) -> None:
    if name:
        raise ServerError(ErrorCode.UNSUPPORTED,
                          "'repository_name' specification is not supported")


class InferenceServicer(GRPCInferenceServiceServicer):
    """Triton's gRPC service over an InferenceCore."""

    def __init__(self, core: InferenceCore, max_stream_in_flight: int = MAX_IN_FLIGHT) -> None:
        self._core = core
        self._unary = _ModelInfer(core)
        self._max_stream_in_flight = max_stream_in_flight  # one stream's requests at once
        self._sessions: set[StreamSession] = set()  # ModelStreamInfer calls open now
        self._stopping = False
        self.errors = ErrorLog(log)

    async def _fail(self, context: grpc.aio.ServicerContext, rpc: str,
                    exc: Exception) -> None:
        """End the call with the status of `exc` (logged as error_log.py says)."""
        await abort(context, self.errors.request_failed(rpc, exc))

    async def _answer(self, context: grpc.aio.ServicerContext, rpc: str,
                      produce: Callable[[], Any]) -> Any:
        try:
            return produce()
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await self._fail(context, rpc, exc)

    # -- inference (the hot path: no coroutine layers, UnaryInfer.start is a plain call) -
    async def ModelInfer(self, body: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """Bytes in, bytes out (grpc/server.py registers no (de)serializer): see
        grpc/wire.py. A body protobuf cannot parse is INVALID_ARGUMENT, as for the
        other RPCs (grpc/handlers.py)."""
        response = await self._infer(body, context)
        try:
            return encode_infer_response_bytes(response)
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await self._fail(context, "ModelInfer", exc)
        finally:
            response.release()

    async def model_infer_parts(self, body: bytes, context: Any) -> ResponseParts:
        """ModelInfer for a transport that copies the response's pieces itself (grpc/h2):
        the outputs go out from their shm buffers, not joined into one bytes first."""
        response = await self._infer(body, context)
        try:
            parts = infer_response_parts(response, encode_response_header(response))
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            response.release()
            await self._fail(context, "ModelInfer", exc)
        return ResponseParts(parts, response.release)

    async def _infer(self, body: bytes | SplitRequest, context: Any) -> InferResponse:
        """A ModelInfer body's successful response (the caller releases it); any error
        ends the call with its status."""
        if type(body) is SplitRequest:  # gathered by the h2 transport, tensors in shm
            try:
                return await self._infer_request(body, body.handles, context)
            finally:
                body.release()  # what no request took
        return await self._infer_request(body, None, context)

    async def _infer_request(self, body: Any, placed: list[Any] | None,
                             context: Any) -> InferResponse:
        if SERVER_LOG.verbose:
            request_log.grpc_call("ModelInfer")
        try:
            request, raw = parse_infer_request(body)
        except Exception as exc:  # noqa: BLE001 - DecodeError, or nesting past protobuf's
            await self._fail(context, "ModelInfer", MalformedRequest(
                f"failed to parse the inference.ModelInferRequest message ({len(body)} "
                f"bytes): {exc}"))
        try:
            version = model_version(request.model_version)
            pending, _ = self._unary.start(
                request.model_name, version, request, raw, placed,
                trace_context.from_grpc(context.invocation_metadata())
                if TRACER.otel is not None else None)
            raw = None  # the tensors have their views; none is kept here (hand_over)
            response = await pending
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await self._fail(context, "ModelInfer", exc)
        if response.error is not None:
            error = response.error
            response.release()
            await self._fail(context, "ModelInfer", error)
        return response

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[pb.ModelInferRequest],
                               context: grpc.aio.ServicerContext) -> None:
        if SERVER_LOG.verbose:
            request_log.grpc_call("ModelStreamInfer")
        session = StreamSession(self._core, context, self.errors,
                                self._max_stream_in_flight)
        self._sessions.add(session)
        try:
            if self._stopping:
                session.stop_reading()
            await session.run(request_iterator)
        finally:
            self._sessions.discard(session)

    def stop_streams(self) -> None:
        """Shutdown: open streams read no more requests and end once theirs answered."""
        self._stopping = True
        for session in list(self._sessions):
            session.stop_reading()

    # -- health and metadata -------------------------------------------------------------
    async def ServerLive(self, request: pb.ServerLiveRequest,
                         context: grpc.aio.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self._core.is_live())

    async def ServerReady(self, request: pb.ServerReadyRequest,
                          context: grpc.aio.ServicerContext) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self._core.is_ready())

    async def ModelReady(self, request: pb.ModelReadyRequest,
                         context: grpc.aio.ServicerContext) -> pb.ModelReadyResponse:
        try:
            ready = await self._core.model_ready(request.name, model_version(request.version))
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await self._fail(context, "ModelReady", exc)
        return pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request: pb.ServerMetadataRequest,
                             context: grpc.aio.ServicerContext) -> pb.ServerMetadataResponse:
        def produce() -> pb.ServerMetadataResponse:
            meta = self._core.server_metadata()
            return pb.ServerMetadataResponse(name=meta.get("name", ""),
                                             version=meta.get("version", ""),
                                             extensions=meta.get("extensions", []))
        return await self._answer(context, "ServerMetadata", produce)

    async def ModelMetadata(self, request: pb.ModelMetadataRequest,
                            context: grpc.aio.ServicerContext) -> pb.ModelMetadataResponse:
        def produce() -> pb.ModelMetadataResponse:
            meta = self._core.model_metadata(request.name, model_version(request.version))
            tensor = pb.ModelMetadataResponse.TensorMetadata
            return pb.ModelMetadataResponse(
                name=meta["name"], versions=meta.get("versions", []),
                platform=meta.get("platform", ""),
                inputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"])
                        for t in meta.get("inputs", [])],
                outputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"])
                         for t in meta.get("outputs", [])])
        return await self._answer(context, "ModelMetadata", produce)

    async def ModelConfig(self, request: pb.ModelConfigRequest,
                          context: grpc.aio.ServicerContext) -> pb.ModelConfigResponse:
        return await self._answer(context, "ModelConfig", lambda: pb.ModelConfigResponse(
            config=config_from_dict(self._core.model_config(
                request.name, model_version(request.version)))))

    async def ModelStatistics(self, request: pb.ModelStatisticsRequest,
                              context: grpc.aio.ServicerContext
                              ) -> pb.ModelStatisticsResponse:
        core = self._core
        try:
            if request.name:
                stats = await statistics.model(core, request.name,
                                               model_version(request.version))
            else:
                stats = await statistics.all_models(core)
            return json_format.ParseDict(stats, pb.ModelStatisticsResponse(),
                                         ignore_unknown_fields=True)
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await self._fail(context, "ModelStatistics", exc)

    # -- model repository extension ---------------------------------------------------
    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest,
                              context: grpc.aio.ServicerContext
                              ) -> pb.RepositoryIndexResponse:
        def produce() -> pb.RepositoryIndexResponse:
            _refuse_repository_name(request.repository_name)
            index = pb.RepositoryIndexResponse.ModelIndex
            return pb.RepositoryIndexResponse(models=[
                index(name=e["name"], version=str(e.get("version", "")),
                      state=e.get("state", ""), reason=e.get("reason", ""))
                for e in self._core.repository_index(ready_only=request.ready)])
        return await self._answer(context, "RepositoryIndex", produce)

    async def RepositoryModelLoad(self, request: pb.RepositoryModelLoadRequest,
                                  context: grpc.aio.ServicerContext
                                  ) -> pb.RepositoryModelLoadResponse:
        try:
            _refuse_repository_name(request.repository_name)
            config, files = _load_parameters(request)
            await self._core.load_model(request.model_name, config=config, files=files)
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await self._fail(context, "RepositoryModelLoad", exc)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: pb.RepositoryModelUnloadRequest,
                                    context: grpc.aio.ServicerContext
                                    ) -> pb.RepositoryModelUnloadResponse:
        try:
            _refuse_repository_name(request.repository_name)
            await self._core.unload_model(request.model_name,
                                          unload_dependents=_unload_dependents(request))
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await self._fail(context, "RepositoryModelUnload", exc)
        return pb.RepositoryModelUnloadResponse()

    # -- shared-memory extensions (grpc/shm.py) -----------------------------------------
    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "SystemSharedMemoryStatus",
                                  lambda: grpc_shm.system_status(self._core, request))

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "SystemSharedMemoryRegister",
                                  lambda: grpc_shm.system_register(self._core, request))

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "SystemSharedMemoryUnregister",
                                  lambda: grpc_shm.system_unregister(self._core, request))

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "CudaSharedMemoryStatus",
                                  lambda: grpc_shm.cuda_status(self._core, request))

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "CudaSharedMemoryRegister",
                                  lambda: grpc_shm.cuda_register(self._core, request))

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "CudaSharedMemoryUnregister",
                                  lambda: grpc_shm.cuda_unregister(self._core, request))

    # -- trace (grpc/trace.py), logging (grpc/logging.py) ------------------------------
    async def TraceSetting(self, request: Any, context: Any) -> Any:
        try:
            return await grpc_trace.trace_setting(self._core, request)
        except Exception as exc:  # noqa: BLE001 - every error becomes a status
            await self._fail(context, "TraceSetting", exc)

    async def LogSettings(self, request: Any, context: Any) -> Any:
        return await self._answer(context, "LogSettings",
                                  lambda: grpc_logging.log_settings(request))


def _load_parameters(request: pb.RepositoryModelLoadRequest
                     ) -> tuple[str | None, dict[str, bytes] | None]:
    config = None
    files: dict[str, bytes] = {}
    for key, param in request.parameters.items():
        kind = param.WhichOneof("parameter_choice")
        if key == "config":
            if kind != "string_param":
                raise ServerError(ErrorCode.INVALID_ARG, f"invalid value type for load "
                                  f"parameter '{key}', expected string_param.")
            config = param.string_param
        elif key.startswith("file:"):
            if kind != "bytes_param":
                raise ServerError(ErrorCode.INVALID_ARG, f"invalid value type for load "
                                  f"parameter '{key}', expected bytes_param.")
            files[key] = param.bytes_param
        else:
            raise ServerError(ErrorCode.INVALID_ARG, f"unrecognized load parameter '{key}'.")
    return config, files or None


def _unload_dependents(request: pb.RepositoryModelUnloadRequest) -> bool:
    param = request.parameters.get("unload_dependents")
    if param is None:
        return False
    if param.WhichOneof("parameter_choice") != "bool_param":
        raise ServerError(ErrorCode.INVALID_ARG, "invalid value type for 'unload_dependents' "
                          "parameter, expected bool_param.")
    return param.bool_param
