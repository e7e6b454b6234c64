"""gRPC `TraceSetting`: Triton's trace extension (its settings are lists of strings)."""

from __future__ import annotations

from tritonclient.grpc import service_pb2 as pb

from pbserve.core.api import InferenceCore
from pbserve.errors import invalid_arg
from pbserve.server.trace_setting import apply_trace_setting, changes_of, model_ready


async def trace_setting(core: InferenceCore, request: pb.TraceSettingRequest
                        ) -> pb.TraceSettingResponse:
    model = request.model_name
    if model and not await model_ready(core, model):
        raise invalid_arg(f"Request for unknown model : {model}")
    if request.settings:
        settings = {name: list(value.value) for name, value in request.settings.items()}
        current = await apply_trace_setting(core, model, changes_of(settings, grpc=True))
    else:
        current = await apply_trace_setting(core, model, None)
    response = pb.TraceSettingResponse()
    for name, value in current.items():
        response.settings[name].value.extend(value if isinstance(value, list) else [value])
    return response
