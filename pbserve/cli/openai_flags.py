"""pbserve's flags for the OpenAI-compatible endpoint (docs/openai.md): Triton's
OpenAI frontend's --openai-port, and its --tokenizer, --chat-template, --backend,
--default-max-tokens and --tool-call-parser under `--openai-` names; made into
`OpenAIOptions` by `openai_options`, each checked before anything starts.

The tokenizer and chat template are loaded once, here, when the flags are checked (so a
bad one is refused before any model loads): `check_openai_flags` keeps what it loaded
on the flags' namespace (`LOADED`), and `openai_options` hands it to the server."""

from __future__ import annotations

import argparse

from pbserve.server.openai.options import (
    BACKENDS,
    DEFAULT_MAX_TOKENS,
    TOOL_CALL_PARSERS,
    OpenAIOptions,
)

# the namespace attribute that holds the ChatTemplate check_openai_flags loaded
LOADED = "openai_loaded_template"


def add_openai_flags(flags: argparse._ActionsContainer) -> None:
    add = flags.add_argument
    add("--openai-port", type=int, default=None, metavar="PORT",
        help="pbserve: serve an OpenAI-compatible API (/v1/completions, "
             "/v1/chat/completions, /v1/embeddings, /v1/models) on this port, beside the "
             "KServe endpoints (Triton's OpenAI frontend listens on 9000)")
    add("--openai-address", default="127.0.0.1",
        help="pbserve: the address the OpenAI endpoint binds to")
    add("--openai-tokenizer", default=None, metavar="PATH",
        help="pbserve: a local Hugging Face tokenizer folder (tokenizer_config.json with "
             "chat_template, tokenizer.json) whose chat template renders chat requests "
             "(the [openai] extra); without it (or --openai-chat-template) chat "
             "completions are refused")
    add("--openai-chat-template", default=None, metavar="FILE",
        help="pbserve: a Jinja chat template file, used instead of the tokenizer's")
    add("--openai-backend", choices=BACKENDS, default=None,
        help="pbserve: the request convention of every model (default: vllm for a "
             "backend: \"vllm\" model, tensorrtllm for the others, as Triton's frontend)")
    add("--openai-default-max-tokens", type=int, default=DEFAULT_MAX_TOKENS, metavar="N",
        help="pbserve: max_tokens of a request that gives none")
    add("--openai-tool-call-parser", choices=TOOL_CALL_PARSERS, default=None,
        help="pbserve: parse tool calls in chat answers in this model family's format")


def check_openai_flags(args: argparse.Namespace) -> str:
    """What is wrong with the --openai-* flags ('' when nothing): one given without
    --openai-port, a port or count out of range, a tokenizer or template that cannot
    be used (loaded here, and kept on `args` for `openai_options`: the one load)."""
    given = [name for name in ("openai_tokenizer", "openai_chat_template", "openai_backend",
                               "openai_tool_call_parser") if getattr(args, name)]
    if args.openai_port is None:
        return f"--{given[0].replace('_', '-')} needs --openai-port" if given else ""
    if not 0 <= args.openai_port <= 65535:
        return f"--openai-port {args.openai_port}: expected a port, 0 to 65535"
    if args.openai_default_max_tokens < 1:
        return "--openai-default-max-tokens must be at least 1"
    from pbserve.server.openai.chat_template import ChatTemplate, ChatTemplateError

    try:
        template = ChatTemplate.load(args.openai_tokenizer, args.openai_chat_template)
    except ChatTemplateError as exc:
        return str(exc)
    setattr(args, LOADED, template)
    return ""


def openai_options(args: argparse.Namespace) -> OpenAIOptions | None:
    """The OpenAI endpoint's options (None without --openai-port), with the template
    `check_openai_flags` loaded (none when the flags were not checked: a frontend
    process's, which serves no OpenAI endpoint; the server would load it)."""
    if args.openai_port is None:
        return None
    return OpenAIOptions(
        address=args.openai_address, port=args.openai_port,
        tokenizer=args.openai_tokenizer, chat_template=args.openai_chat_template,
        backend=args.openai_backend, default_max_tokens=args.openai_default_max_tokens,
        tool_call_parser=args.openai_tool_call_parser,
        control_mode=args.model_control_mode, template=getattr(args, LOADED, None))
