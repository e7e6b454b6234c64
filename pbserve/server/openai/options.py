"""What the OpenAI endpoint takes from the command line (`--openai-*`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pbserve.server.openai.chat_template import ChatTemplate

# Triton's --default-max-tokens
DEFAULT_MAX_TOKENS = 16
BACKENDS = ("vllm", "tensorrtllm")
TOOL_CALL_PARSERS = ("llama3", "mistral")


@dataclass(frozen=True)
class OpenAIOptions:
    """`--openai-port` and its companions (Triton's frontend's --tokenizer, --backend,
    --chat-template, --default-max-tokens, --tool-call-parser)."""

    address: str
    port: int
    tokenizer: str | None = None  # a local Hugging Face tokenizer folder
    chat_template: str | None = None  # a Jinja file that replaces the tokenizer's
    backend: str | None = None  # the request convention for every model (else per model)
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    tool_call_parser: str | None = None
    control_mode: str = "none"  # --model-control-mode: load and unload need "explicit"
    # tokenizer and chat_template loaded already (by the flags' check); None: the
    # server loads them (None as well when neither is given)
    template: ChatTemplate | None = field(default=None, compare=False, repr=False)
