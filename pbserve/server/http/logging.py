"""`GET/POST /v2/logging`: Triton's logging extension over HTTP.

GET answers the six settings; POST changes those its JSON object names (a null leaves
one as it is) and answers them all. Errors are Triton's HTTP frontend's: a value of the
wrong type is 400 with TritonJson's words, `log_file` 501 (it cannot be changed over
the network), an unknown `log_format` 503.
"""

from __future__ import annotations

from pbserve.core.observability.log_settings import SERVER_LOG
from pbserve.errors import invalid_arg
from pbserve.server.http.codec import parse_json
from pbserve.server.http.messages import HttpReply, HttpRequest, json_reply, method_not_allowed


def handle(request: HttpRequest) -> HttpReply:
    if request.method == b"GET":
        return json_reply(SERVER_LOG.settings.as_dict())
    if request.method != b"POST":
        return method_not_allowed()
    changes = parse_json(request.body, "dynamic logging") if request.body else {}
    if not isinstance(changes, dict):
        raise invalid_arg("the dynamic logging request must be a JSON object")
    return json_reply(SERVER_LOG.update(changes))
