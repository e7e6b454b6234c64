"""POST /v1/chat/completions: the conversation rendered with the chat template, sent
as a generation request; the answer as one `chat.completion` or as
`chat.completion.chunk` events, with Triton's frontend's checks.

Tools as Triton's frontend takes them: the tools go to the template; a named
`tool_choice` (or "required": the first tool) asks the model for that tool's
parameters as guided JSON and answers its text as that tool's arguments; "auto" (or
none given) with `--openai-tool-call-parser` parses the text for tool calls. Streamed
with a parser, a choice whose text starts as a tool call is held until its end and
sent as one tool-call delta (Triton's parser streams the arguments as they parse).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pbserve.server.http.messages import HttpReply, HttpStreamReply, json_reply
from pbserve.server.openai.body import Body
from pbserve.server.openai.endpoint import Endpoint, collect, generation_of
from pbserve.server.openai.errors import OpenAIError, bad_request
from pbserve.server.openai.generation import Piece, merged, pieces
from pbserve.server.openai.sse import Indexed, choice_events, first_piece, with_first
from pbserve.server.openai.tool_calls import PARSERS, ToolCallParser
from pbserve.server.openai.usage import Usage

ROLE = "assistant"
NO_TEMPLATE = ("chat completions need a chat template: start pbserve with "
               "--openai-tokenizer PATH (a Hugging Face tokenizer folder whose "
               "tokenizer_config.json has a chat_template) or --openai-chat-template FILE")


async def create_chat_completion(endpoint: Endpoint, body: Body
                                 ) -> HttpReply | HttpStreamReply:
    model = body.string("model", required=True)
    conversation = _conversation(body)
    tools = body.array("tools")
    tool_name, auto = _tool_choice(endpoint, body, tools)
    _refuse_unsupported(body)
    if endpoint.template is None:
        raise OpenAIError(500, NO_TEMPLATE)
    handle, plan = endpoint.plans.resolve(model)
    try:
        prompt = endpoint.template.render(conversation, tools=tools or None)
    except ValueError as exc:
        raise bad_request(f"the chat template refused the messages: {exc}",
                          "messages") from None
    max_tokens = body.integer("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.integer("max_tokens")
    generation = generation_of(endpoint, body, model, prompt, max_tokens)
    if tool_name is not None:
        generation.guided_json = _tool_parameters(tools or [], tool_name)
    parser = PARSERS[endpoint.options.tool_call_parser]() \
        if auto and tools and endpoint.options.tool_call_parser else None
    n = body.integer("n", 1, minimum=1, maximum=128)
    streams = [pieces(handle, plan.generation_request(generation)) for _ in range(n)]
    usage = Usage(prompt, n, endpoint.token_counter)
    what = f"OpenAI /v1/chat/completions of model '{model}'"
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()),
            "model": model, "system_fingerprint": None}
    if generation.stream:
        items = merged(streams, what)
        first = await first_piece(items)
        return HttpStreamReply(_events(head, with_first(first, items), n, usage,
                                       endpoint.include_usage(body), tool_name, parser))
    texts, reasons = await collect(merged(streams, what), n, usage)
    choices = []
    for index in range(n):
        message, reason = _message(texts[index], tool_name, parser, head["id"])
        choices.append({"index": index, "message": message, "logprobs": None,
                        "finish_reason": reason if reason != "stop" else reasons[index]})
    return json_reply({**head, "object": "chat.completion", "choices": choices,
                       "usage": await usage.value()})


# --- the request -----------------------------------------------------------------------

def _conversation(body: Body) -> list[dict[str, Any]]:
    """The messages as the template takes them (Triton's parse_chat_messages): text
    parts only, a tool call's arguments as an object."""
    messages = body.array("messages")
    if messages is None:
        raise bad_request("'messages' is a required field", "messages")
    if not messages:
        raise bad_request("'messages' must hold at least one message", "messages")
    conversation = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request(f"messages[{i}] must be an object with a 'role' string",
                              "messages")
        item = dict(message)
        content = item.get("content")
        if isinstance(content, list):
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind != "text":
                    raise bad_request(f"only text message is supported, but got {kind}",
                                      "messages")
            item["content"] = [{"type": "text", "text": p.get("text", "")} for p in content]
        elif content is not None and not isinstance(content, str):
            raise bad_request(f"messages[{i}].content must be a string or a list of "
                              f"parts", "messages")
        if item["role"] == "assistant" and isinstance(item.get("tool_calls"), list):
            item["tool_calls"] = [_call_with_object(call) for call in item["tool_calls"]]
        conversation.append(item)
    return conversation


def _call_with_object(call: Any) -> Any:
    try:
        function = dict(call["function"])
        if isinstance(function.get("arguments"), str):
            function["arguments"] = json.loads(function["arguments"])
        return {**call, "function": function}
    except (TypeError, KeyError, ValueError):
        raise bad_request("an assistant message's tool_calls must each have a function "
                          "whose arguments are a JSON object", "messages") from None


def _tool_choice(endpoint: Endpoint, body: Body, tools: list | None
                 ) -> tuple[str | None, bool]:
    """(the name of the tool the model must call, or None; whether to parse for tool
    calls), with Triton's frontend's checks and words."""
    choice = body.raw("tool_choice")
    parser = endpoint.options.tool_call_parser
    if choice == "required":
        if not tools:
            raise bad_request('"required" tool choice requires '
                              'CreateChatCompletionRequest.tools to be provided',
                              "tool_choice")
        return _function_name(tools[0]), False
    if isinstance(choice, dict):
        if not tools:
            raise bad_request("Named tool choice requires CreateChatCompletionRequest."
                              "tools to be provided", "tool_choice")
        name = (choice.get("function") or {}).get("name")
        if not isinstance(name, str):
            raise bad_request("a named tool_choice needs function.name", "tool_choice")
        return name, False
    if choice == "auto" and parser is None:
        raise bad_request('"auto" tool choice requires --openai-tool-call-parser to be set',
                          "tool_choice")
    if choice is None and tools and parser is None:
        raise bad_request("having tools in the request requires --openai-tool-call-parser "
                          "to be set", "tools")
    if choice not in (None, "auto", "none"):
        raise bad_request(f"'tool_choice' must be none, auto, required or a named "
                          f"function, not {choice!r}", "tool_choice")
    return None, choice != "none"


def _function_name(tool: Any) -> str:
    name = tool.get("function", {}).get("name") if isinstance(tool, dict) else None
    if not isinstance(name, str):
        raise bad_request("each tool must have function.name", "tools")
    return name


def _tool_parameters(tools: list, name: str) -> str:
    for tool in tools:
        if _function_name(tool) == name:
            return json.dumps(tool["function"].get("parameters") or {})
    raise bad_request(f"Tool '{name}' has not been passed in `tools`.", "tool_choice")


def _refuse_unsupported(body: Body) -> None:
    if body.has("logit_bias"):
        raise bad_request("logit bias is not currently supported", "logit_bias")
    logprobs = body.boolean("logprobs")
    if body.has("top_logprobs") and not logprobs:
        raise bad_request("`top_logprobs` can only be used when `logprobs` is True",
                          "top_logprobs")
    if logprobs:
        raise bad_request("logprobs are not supported by pbserve's OpenAI endpoint",
                          "logprobs")


# --- the answer ------------------------------------------------------------------------

def _message(text: str, tool_name: str | None, parser: ToolCallParser | None,
             request_id: str) -> tuple[dict[str, Any], str]:
    """A whole choice's message and finish reason."""
    if tool_name is not None:
        call = {"id": request_id, "type": "function",
                "function": {"name": tool_name, "arguments": text}}
        return {"role": ROLE, "content": "", "tool_calls": [call]}, "stop"
    calls = parser.parse(text) if parser is not None else None
    if calls:
        return {"role": ROLE, "content": "", "tool_calls": calls}, "tool_calls"
    return {"role": ROLE, "content": text, "tool_calls": None}, "stop"


class _ChoiceStream:
    """One choice's deltas; with a parser, text that may be a tool call is held."""

    def __init__(self, tool_name: str | None, parser: ToolCallParser | None) -> None:
        self.tool_name = tool_name
        self.parser = parser
        self.held: list[str] | None = [] if parser is not None else None

    def delta(self, text: str, final: bool) -> tuple[dict[str, Any] | None, str | None]:
        """The delta of a piece's text (None: nothing to send yet) and, on the final
        piece, the finish reason."""
        if self.tool_name is not None:
            call = {"index": 0, "function": {"name": self.tool_name, "arguments": text}}
            return {"tool_calls": [call]}, "stop" if final else None
        if self.held is None:
            return {"content": text}, "stop" if final else None
        self.held.append(text)
        so_far = "".join(self.held)
        if not final:
            if self.parser.may_start_call(so_far):  # type: ignore[union-attr]
                return None, None
            self.held = None
            return {"content": so_far}, None
        calls = self.parser.parse(so_far)  # type: ignore[union-attr]
        if calls:
            return {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}, \
                "tool_calls"
        return {"content": so_far}, "stop"


def _events(head: dict[str, Any], items: AsyncIterator[Indexed], n: int, usage: Usage,
            include_usage: bool, tool_name: str | None, parser: ToolCallParser | None
            ) -> AsyncIterator[bytes]:
    choices = [_ChoiceStream(tool_name, parser) for _ in range(n)]

    def choice_of(index: int, piece: Piece) -> dict[str, Any] | None:
        delta, reason = choices[index].delta(piece.text, piece.final)
        if delta is None:
            return None
        if reason == "stop" and piece.finish_reason is not None:
            reason = piece.finish_reason
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}

    roles = [{"index": index, "delta": {"role": ROLE, "content": ""}, "logprobs": None,
              "finish_reason": None} for index in range(n)]
    return choice_events({**head, "object": "chat.completion.chunk"}, items, usage,
                         include_usage, choice_of, roles)
