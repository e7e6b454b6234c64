"""POST /v1/completions: a prompt to a model, its text back as one `text_completion`
or as events (`stream: true`), with Triton's frontend's checks and mapping.

`n` choices are `n` requests to the model, run at once (Triton's frontend refuses
n > 1); `echo` on a model without an `exclude_input_in_output` input puts the prompt
before the text here (Triton's leaves it out)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pbserve.server.http.messages import HttpReply, HttpStreamReply, json_reply
from pbserve.server.openai.body import Body
from pbserve.server.openai.endpoint import Endpoint, collect, generation_of
from pbserve.server.openai.errors import bad_request
from pbserve.server.openai.generation import Piece, merged, pieces
from pbserve.server.openai.sse import Indexed, choice_events, first_piece, with_first
from pbserve.server.openai.usage import Usage

OBJECT = "text_completion"


async def create_completion(endpoint: Endpoint, body: Body) -> HttpReply | HttpStreamReply:
    model = body.string("model", required=True)
    prompt = _prompt(body)
    for name, message in (("suffix", "suffix is not currently supported"),
                          ("logit_bias", "logit bias is not supported")):
        if body.has(name):
            raise bad_request(message, name)
    if body.integer("best_of", 1, minimum=1) > 1:
        raise bad_request(f"Received best_of={body.raw('best_of')}, but only single "
                          f"choice (best_of=1) is currently supported", "best_of")
    if body.integer("logprobs", 0, minimum=0, maximum=5):
        raise bad_request("logprobs are not supported by pbserve's OpenAI endpoint",
                          "logprobs")
    handle, plan = endpoint.plans.resolve(model)
    generation = generation_of(endpoint, body, model, prompt, body.integer("max_tokens"))
    generation.echo = body.boolean("echo") if body.has("echo") else None
    n = body.integer("n", 1, minimum=1, maximum=128)
    streams = [pieces(handle, plan.generation_request(generation)) for _ in range(n)]
    usage = Usage(prompt, n, endpoint.token_counter)
    what = f"OpenAI /v1/completions of model '{model}'"
    echo = prompt if generation.echo and not plan.echoes else ""
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": OBJECT, "created": int(time.time()),
            "model": model, "system_fingerprint": None}
    if generation.stream:
        items = merged(streams, what)
        first = await first_piece(items)
        return HttpStreamReply(_events(head, with_first(first, items), usage, echo,
                                       endpoint.include_usage(body)))
    texts, reasons = await collect(merged(streams, what), n, usage)
    choices = [{"index": i, "text": echo + texts[i], "logprobs": None,
                "finish_reason": reasons[i]} for i in range(n)]
    return json_reply({**head, "choices": choices, "usage": await usage.value()})


def _prompt(body: Body) -> str:
    """Triton's frontend: one non-empty string."""
    if not body.has("prompt"):
        raise bad_request("'prompt' is a required field", "prompt")
    prompt = body.raw("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise bad_request("only single string input is supported", "prompt")
    if not prompt:
        raise bad_request("prompt must be non-empty", "prompt")
    return prompt


def _events(head: dict[str, Any], items: AsyncIterator[Indexed], usage: Usage, echo: str,
            include_usage: bool) -> AsyncIterator[bytes]:
    echoed: set[int] = set()

    def choice_of(index: int, piece: Piece) -> dict[str, Any]:
        text = piece.text
        if echo and index not in echoed:
            echoed.add(index)
            text = echo + text
        reason = (piece.finish_reason or "stop") if piece.final else None
        return {"index": index, "text": text, "logprobs": None, "finish_reason": reason}

    return choice_events(head, items, usage, include_usage, choice_of)
