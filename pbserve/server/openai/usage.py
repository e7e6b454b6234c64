"""Token counts (`usage`) as Triton's frontend counts them: from the model's
`num_input_tokens` and `num_output_tokens` outputs (the vLLM and TensorRT-LLM
conventions ask for them), the prompt's count taken once and the output counts added
up over the responses; no usage when the model reports none.

pbserve's addition: a model that reports no counts gets them from the tokenizer of
`--openai-tokenizer` when there is one (the prompt's tokens, and each choice's text's).
"""

from __future__ import annotations

from collections.abc import Callable

from pbserve.server.openai.generation import Piece

Counter = Callable[[str], "int | None"]


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

    def value(self) -> dict[str, int] | None:
        """OpenAI's `usage` object, or None when nothing counted the tokens."""
        if self._reported and self.prompt_tokens is not None:
            return _usage(self.prompt_tokens, self.completion_tokens)
        if self._counter is None or self._texts is None:
            return None
        prompt = self._counter(self._prompt)
        if prompt is None:
            return None
        completion = sum(self._counter("".join(parts)) or 0 for parts in self._texts)
        return _usage(prompt, completion)


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}
