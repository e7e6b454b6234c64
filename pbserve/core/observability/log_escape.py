"""A model's log message as Triton writes it: JSON-escaped and quoted (`"message"`), so
that no message can forge a line of the log. `TRITON_SERVER_ESCAPE_LOG_MESSAGES=0` turns
that off, as in Triton."""

from __future__ import annotations

import json
import os

ESCAPE_ENV = "TRITON_SERVER_ESCAPE_LOG_MESSAGES"
_ESCAPE = os.environ.get(ESCAPE_ENV) != "0"


def escaped(message: str) -> str:
    return json.dumps(message, ensure_ascii=False) if _ESCAPE else message
