"""gRPC `LogSettings`: Triton's logging extension.

The request's typed values (`bool_param`, `uint32_param`, `string_param`) become the
values `SERVER_LOG.update` takes; a value of the wrong kind is INVALID_ARGUMENT in
Triton's gRPC words (`expect boolean for 'log_info'`), and naming `log_file` at all is
UNIMPLEMENTED, as in Triton.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import service_pb2 as pb

from pbserve.core.observability.log_settings import SERVER_LOG, LogFormatError, SettingTypeError
from pbserve.errors import ErrorCode, ServerError

_EXPECT = {"bool": "boolean", "uint": "int32", "string": "string"}
_NOT_SET = object()  # a SettingValue with no value: the wrong kind for every setting


def log_settings(request: pb.LogSettingsRequest) -> pb.LogSettingsResponse:
    changes: dict[str, Any] = {}
    for name, value in request.settings.items():
        kind = value.WhichOneof("parameter_choice")
        changes[name] = getattr(value, kind) if kind else _NOT_SET
    if "log_file" in changes:
        changes["log_file"] = _NOT_SET  # refused whatever it says
    try:
        settings = SERVER_LOG.update(changes)
    except SettingTypeError as exc:
        raise ServerError(ErrorCode.INVALID_ARG,
                          f"expect {_EXPECT[exc.expected]} for '{exc.name}'") from None
    except LogFormatError as exc:
        raise ServerError(ErrorCode.INVALID_ARG,
                          f"invalid argument for log_format, got: {exc.value}") from None
    response = pb.LogSettingsResponse()
    for name, setting in settings.items():
        field = response.settings[name]
        if isinstance(setting, bool):
            field.bool_param = setting
        elif isinstance(setting, int):
            field.uint32_param = setting
        else:
            field.string_param = setting
    return response
