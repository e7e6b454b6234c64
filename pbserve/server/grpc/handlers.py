"""The GRPCInferenceService's method handlers, built from the service descriptor, with
request decoding that never raises, and --grpc-restricted-protocol.

grpcio calls a handler's deserializer before the servicer, and a message that does not
parse (random or truncated protobuf) raises there: grpcio then logs a traceback and ends
the call UNKNOWN. Here a message that does not parse decodes to `Undecodable`; a unary
call ends INVALID_ARGUMENT before the servicer runs, and the stream's reader ends its call
with that status (grpc/stream.py). A call to a restricted method without its metadata key
ends UNAVAILABLE before anything else (restrictions.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from pbserve.core.observability.log_settings import SERVER_LOG
from pbserve.errors import MalformedRequest, ServerError
from pbserve.server import request_log
from pbserve.server.error_log import ErrorLog
from pbserve.server.grpc.codec import status_code, status_message
from pbserve.server.restrictions import GRPC_CATEGORIES, Restriction, grpc_refusal

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]


class Undecodable:
    """What a message that does not parse decodes to."""

    __slots__ = ("error",)

    def __init__(self, error: MalformedRequest) -> None:
        self.error = error


async def abort(context: grpc.aio.ServicerContext, error: ServerError) -> None:
    """End the call with the error's status and message (raises grpc.aio.AbortError)."""
    await context.abort(status_code(error), status_message(error.message))


# RPCs registered without a (de)serializer: the servicer parses the bytes itself, reading
# large tensors in place, and answers bytes (grpc/wire.py).
RAW_METHODS = ("ModelInfer",)


def _tolerant(message_type: Any) -> Callable[[bytes], Any]:
    parse = message_type.FromString
    name = message_type.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # noqa: BLE001 - DecodeError, or nesting past protobuf's
            return Undecodable(MalformedRequest(
                f"failed to parse the {name} message ({len(data)} bytes): {exc}"))
    return deserialize


def _checked(behavior: Callable[[Any, Any], Awaitable[Any]], rpc: str,
             errors: ErrorLog) -> Callable[[Any, Any], Awaitable[Any]]:
    async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if SERVER_LOG.verbose:
            request_log.grpc_call(rpc)
        if type(request) is Undecodable:
            await abort(context, errors.request_failed(rpc, request.error))
        return await behavior(request, context)
    return checked


def _restricted(behavior: Callable[[Any, Any], Awaitable[Any]],
                restriction: Restriction) -> Callable[[Any, Any], Awaitable[Any]]:
    async def restricted(request: Any, context: grpc.aio.ServicerContext) -> Any:
        reason = grpc_refusal(restriction, context.invocation_metadata())
        if reason is not None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, reason)
        return await behavior(request, context)
    return restricted


def method_handlers(servicer: Any, errors: ErrorLog,
                    restricted: dict[str, Restriction] | None = None
                    ) -> dict[str, grpc.RpcMethodHandler]:
    """Each RPC of the service (by name) to the servicer's method of that name;
    `restricted`: the groups --grpc-restricted-protocol closes."""
    handlers = {}
    for method in SERVICE.methods:
        if method.name in RAW_METHODS:  # bytes in, bytes out (grpc/wire.py)
            behavior = getattr(servicer, method.name)
            restriction = (restricted or {}).get(GRPC_CATEGORIES.get(method.name, ""))
            if restriction is not None:
                behavior = _restricted(behavior, restriction)
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(behavior)
            continue
        request_type = getattr(pb, method.input_type.name)
        serialize = getattr(pb, method.output_type.name).SerializeToString
        behavior = getattr(servicer, method.name)
        restriction = (restricted or {}).get(GRPC_CATEGORIES.get(method.name, ""))
        if restriction is not None:
            behavior = _restricted(behavior, restriction)
        if method.client_streaming:  # ModelStreamInfer: its reader checks each message
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                behavior, request_deserializer=_tolerant(request_type),
                response_serializer=serialize)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _checked(behavior, method.name, errors),
                request_deserializer=_tolerant(request_type), response_serializer=serialize)
    return handlers


def add_service(server: grpc.aio.Server, servicer: Any, errors: ErrorLog,
                restricted: dict[str, Restriction] | None = None) -> None:
    """Serve `servicer`'s RPCs on `server` (as the generated add_..._to_server does)."""
    handlers = method_handlers(servicer, errors, restricted)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE.full_name, handlers),))
    register = getattr(server, "add_registered_method_handlers", None)
    if register is not None:  # grpcio >= 1.63: looked up without the generic handler
        register(SERVICE.full_name, handlers)
