"""What the completion, chat and embedding endpoints share: the core and the model
plans, the chat template, the flags; the fields every generation request reads
(Triton's frontend's checks); a non-streamed request's pieces collected."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from pbserve.core.api import InferenceCore
from pbserve.server.openai.body import Body
from pbserve.server.openai.chat_template import ChatTemplate
from pbserve.server.openai.conventions import Generation, ModelPlans
from pbserve.server.openai.errors import bad_request
from pbserve.server.openai.generation import Piece
from pbserve.server.openai.options import OpenAIOptions
from pbserve.server.openai.usage import Counter, Usage

# Fields that are not vLLM sampling parameters (Triton's list, and `n`, which pbserve
# answers with n requests).
NOT_SAMPLING = frozenset((
    "model", "stream", "messages", "prompt", "echo", "store", "metadata",
    "response_format", "service_tier", "stream_options", "tools", "tool_choice",
    "parallel_tool_calls", "user", "function_call", "functions", "suffix",
    "max_completion_tokens", "max_tokens", "logprobs", "top_logprobs", "best_of", "n"))


@dataclass
class Endpoint:
    """What every OpenAI request handler is given: the core, the model plans, the flags,
    the chat template (None: chat is refused) and the largest body taken."""

    core: InferenceCore
    plans: ModelPlans
    options: OpenAIOptions
    template: ChatTemplate | None
    max_input: int

    @property
    def token_counter(self) -> Counter | None:
        return self.template.token_counts if self.template is not None else None

    @staticmethod
    def include_usage(body: Body) -> bool:
        """`stream_options.include_usage`, checked (False when not given)."""
        options = body.mapping("stream_options")
        if options is None:
            return False
        value = options.get("include_usage", False)
        if not isinstance(value, bool):
            raise bad_request("'stream_options.include_usage' must be a boolean",
                              "stream_options")
        return value


def generation_of(endpoint: Endpoint, body: Body, model: str, prompt: str,
                  max_tokens: int | None) -> Generation:
    """The generation fields of a completion or chat request, checked."""
    stream = body.boolean("stream")
    if body.has("stream_options") and not stream:
        raise bad_request("`stream_options` can only be used when `stream` is True",
                          "stream_options")
    if max_tokens is None:
        max_tokens = endpoint.options.default_max_tokens
    elif max_tokens < 1:
        raise bad_request(f"'max_tokens' must be at least 1, got {max_tokens}",
                          "max_tokens")
    sampling = {k: v for k, v in body.fields.items()
                if k not in NOT_SAMPLING and v is not None}
    return Generation(
        model=model, prompt=prompt, stream=stream, max_tokens=max_tokens,
        sampling=sampling, stop=body.strings("stop"),
        temperature=body.number("temperature", 0, 2), top_p=body.number("top_p", 0, 1),
        frequency_penalty=body.number("frequency_penalty", -2, 2),
        presence_penalty=body.number("presence_penalty", -2, 2),
        seed=body.integer("seed"))


async def collect(items: AsyncIterator[tuple[int, Piece]], n: int, usage: Usage
                  ) -> tuple[list[str], list[str]]:
    """Each choice's text and finish reason, the responses of a choice joined (pbserve:
    a model that streams anyway is answered whole; Triton's frontend wants one
    response); the first error fails the request (its status, its message)."""
    texts: list[list[str]] = [[] for _ in range(n)]
    reasons = ["stop"] * n
    try:
        async for index, piece in items:
            if piece.error is not None:
                raise piece.error
            usage.add(index, piece)
            texts[index].append(piece.text)
            if piece.finish_reason is not None:
                reasons[index] = piece.finish_reason
    finally:
        await items.aclose()  # type: ignore[attr-defined]
    return ["".join(parts) for parts in texts], reasons
