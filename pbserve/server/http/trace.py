"""`GET/POST /v2[/models/<m>]/trace/setting`: Triton's trace extension over HTTP."""

from __future__ import annotations

from pbserve.core.api import InferenceCore
from pbserve.errors import invalid_arg
from pbserve.server.http.codec import parse_json
from pbserve.server.http.messages import HttpReply, HttpRequest, json_reply, method_not_allowed
from pbserve.server.trace_setting import apply_trace_setting, changes_of, model_ready


async def handle(core: InferenceCore, request: HttpRequest, model: str = "") -> HttpReply:
    if request.method not in (b"GET", b"POST"):
        return method_not_allowed()
    if model and not await model_ready(core, model):
        raise invalid_arg(f"Request for unknown model : {model}")
    if request.method == b"GET":
        return json_reply(await apply_trace_setting(core, model, None))
    body = parse_json(request.body, "trace") if request.body else {}
    if not isinstance(body, dict):
        raise invalid_arg("the trace setting request must be a JSON object")
    return json_reply(await apply_trace_setting(core, model, changes_of(body, grpc=False)))
