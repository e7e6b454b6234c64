"""Token counts (`usage`) as Triton's frontend counts them: from the model's
`num_input_tokens` and `num_output_tokens` outputs (the vLLM and TensorRT-LLM
conventions ask for them), the prompt's count taken once and the output counts added
up over the responses; no usage when the model reports none.

pbserve's addition: a model that reports no counts gets them from the tokenizer of
`--openai-tokenizer` when there is one (the prompt's tokens, and each choice's whole
text's: a tokenizer counts a text's pieces apart differently, merges across their
edges lost). Texts of more than `INLINE_CHARS` characters in all are counted in a
thread, with the tokenizer's `encode_batch`, which lets go of the GIL (its `encode`
holds it: a thread would not free the loop), so that a long answer does not stall the
event loop (about 0.6 ms per 4 KB with a one-word-a-token tokenizer; a 1 MB text ~0.5 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pbserve.server.openai.generation import Piece

# The token counts of texts (None: no tokenizer to count with)
Counter = Callable[[list[str]], "list[int] | None"]
# up to this many characters (prompt and choices together) are counted on the loop
INLINE_CHARS = 4096


class Usage:
    """The counts of one request's choices."""

    def __init__(self, prompt: str, choices: int, counter: Counter | None) -> None:
        self._prompt = prompt
        self._counter = counter
        self.prompt_tokens: int | None = None
        self.completion_tokens = 0
        self._reported = False
        # the text of each choice, for the tokenizer's count (only when it may be needed)
        self._texts: list[list[str]] | None = [[] for _ in range(choices)] \
            if counter is not None else None

    def add(self, index: int, piece: Piece) -> None:
        if piece.input_tokens is not None and piece.output_tokens is not None:
            if self.prompt_tokens is None:
                self.prompt_tokens = piece.input_tokens
            self.completion_tokens += piece.output_tokens
            self._reported = True
        elif piece.input_tokens is not None and self.prompt_tokens is None:
            self.prompt_tokens = piece.input_tokens
        if self._texts is not None and piece.text:
            self._texts[index].append(piece.text)

    async def value(self) -> dict[str, int] | None:
        """OpenAI's `usage` object, or None when nothing counted the tokens."""
        if self._reported and self.prompt_tokens is not None:
            return _usage(self.prompt_tokens, self.completion_tokens)
        if self._counter is None or self._texts is None:
            return None
        texts = [self._prompt, *("".join(parts) for parts in self._texts)]
        if sum(map(len, texts)) <= INLINE_CHARS:
            counts = self._counter(texts)
        else:
            counts = await asyncio.to_thread(self._counter, texts)
        if counts is None:
            return None
        return _usage(counts[0], sum(counts[1:]))


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}
