"""Tool calls in a model's text, for `--openai-tool-call-parser` (Triton's
`--tool-call-parser`): the llama3 JSON format (`<|python_tag|>` or `{` first, JSON
objects separated by "; ", each with `name` and `arguments` or `parameters`) and
mistral's (`[TOOL_CALLS]` or `[` first, then a JSON list of {name, arguments}).

Text that does not start as a tool call is content; text that starts as one but does
not parse is content too, as Triton's parsers answer it.
"""

from __future__ import annotations

import json
import random
import re
import string
import uuid
from typing import Any

_ALPHANUMERIC = string.ascii_letters + string.digits
_MISTRAL_LIST = re.compile(r"\[{.*}\]", re.DOTALL)


class ToolCallParser:
    """One model family's tool-call format."""

    markers: tuple[str, ...] = ()

    def starts_call(self, text: str) -> bool:
        """`text` begins with one of the format's markers."""
        return text.startswith(self.markers)

    def may_start_call(self, text: str) -> bool:
        """`text` is a call's beginning or could still become one (a marker's prefix)."""
        return self.starts_call(text) or any(m.startswith(text) for m in self.markers)

    def parse(self, text: str) -> list[dict[str, Any]] | None:
        """OpenAI `tool_calls` of `text`, or None when it is no (parsable) call."""
        raise NotImplementedError


class Llama3Parser(ToolCallParser):
    markers = ("<|python_tag|>", "{")

    def parse(self, text: str) -> list[dict[str, Any]] | None:
        if not self.starts_call(text):
            return None
        decoder = json.JSONDecoder()
        start = len(self.markers[0]) if text.startswith(self.markers[0]) else 0
        calls = []
        try:
            while start < len(text):
                value, end = decoder.raw_decode(text[start:])
                start += end + len("; ")
                arguments = value["arguments"] if "arguments" in value \
                    else value["parameters"]
                calls.append(_call(f"cmpl-{uuid.uuid4().hex}", value["name"],
                                   json.dumps(arguments)))
        except (ValueError, KeyError, TypeError):
            return None
        return calls


class MistralParser(ToolCallParser):
    markers = ("[TOOL_CALLS]", "[")

    def parse(self, text: str) -> list[dict[str, Any]] | None:
        if not self.starts_call(text):
            return None
        content = text.replace(self.markers[0], "").strip()
        try:
            try:
                values = json.loads(content)
            except ValueError:
                found = _MISTRAL_LIST.findall(content)
                if not found:
                    return None
                values = json.loads(found[0])
            return [_call("".join(random.choices(_ALPHANUMERIC, k=9)), value["name"],
                          json.dumps(value["arguments"], ensure_ascii=False))
                    for value in values]
        except (ValueError, KeyError, TypeError):
            return None


PARSERS: dict[str, type[ToolCallParser]] = {"llama3": Llama3Parser,
                                            "mistral": MistralParser}


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}
