"""A tokenizer's chat template (`--openai-tokenizer`, `--openai-chat-template`), applied
with jinja2 as Hugging Face's `apply_chat_template` applies it (a sandbox, trim_blocks
and lstrip_blocks, `raise_exception`, `tojson`, the bos and eos tokens), and the
tokenizer (`tokenizers`) to count a text's tokens when a model reports none.

The folder is one Hugging Face writes: `tokenizer_config.json` (its `chat_template`, a
string or a list of named templates, and the special tokens), `chat_template.jinja`
when the template is kept apart, `tokenizer.json`. Nothing is downloaded.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

EXTRA_HINT = "pip install 'pbserve[openai]'"


class ChatTemplateError(ValueError):
    """A tokenizer folder or template that cannot be used (a start-up error)."""


def _token(value: Any) -> str:
    """A special token as tokenizer_config.json writes it: a string or {"content"}."""
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return value if isinstance(value, str) else ""


def _pick_template(value: Any, with_tools: bool) -> str | None:
    """The template of `chat_template`: a string, or a list of {"name", "template"}
    ("tool_use" when tools are given and it exists, else "default")."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {item.get("name"): item.get("template") for item in value
                 if isinstance(item, dict)}
        if with_tools and "tool_use" in named:
            return named["tool_use"]
        return named.get("default")
    return None


class ChatTemplate:
    """Renders a conversation into the prompt a model is given."""

    def __init__(self, templates: Any, bos_token: str = "", eos_token: str = "",
                 tokenizer: Any = None) -> None:
        try:
            import jinja2.ext
            import jinja2.sandbox
        except ImportError:
            raise ChatTemplateError(f"chat templates need jinja2: {EXTRA_HINT}") from None
        self._env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
        self._env.filters["tojson"] = _tojson
        self._env.globals["raise_exception"] = _raise_exception
        self._env.globals["strftime_now"] = _strftime_now
        self._compiled: dict[bool, Any] = {}
        for with_tools in (False, True):
            source = _pick_template(templates, with_tools)
            if source is None:
                continue
            try:
                self._compiled[with_tools] = self._env.from_string(source)
            except jinja2.TemplateSyntaxError as exc:
                raise ChatTemplateError(f"the chat template does not parse: {exc}") from None
        if not self._compiled:
            raise ChatTemplateError("no usable chat template (a string, or a list with "
                                    "a template named 'default')")
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._tokenizer = tokenizer

    @classmethod
    def load(cls, tokenizer_dir: str | None, template_file: str | None
             ) -> ChatTemplate | None:
        """The template of the flags (None when neither is given); ChatTemplateError
        naming what is missing or wrong."""
        if not tokenizer_dir and not template_file:
            return None
        config: dict[str, Any] = {}
        tokenizer = None
        templates: Any = None
        if tokenizer_dir:
            folder = Path(tokenizer_dir)
            if not folder.is_dir():
                raise ChatTemplateError(f"--openai-tokenizer '{tokenizer_dir}': not a "
                                        f"folder (a local Hugging Face tokenizer folder)")
            config = _read_config(folder)
            templates = config.get("chat_template")
            jinja_file = folder / "chat_template.jinja"
            if templates is None and jinja_file.is_file():
                templates = jinja_file.read_text()
            tokenizer = _load_tokenizer(folder)
        if template_file:
            try:
                templates = Path(template_file).read_text()
            except OSError as exc:
                raise ChatTemplateError(f"--openai-chat-template '{template_file}': "
                                        f"{exc.strerror}") from None
        if templates is None:
            raise ChatTemplateError(f"--openai-tokenizer '{tokenizer_dir}': its "
                                    f"tokenizer_config.json has no chat_template (give "
                                    f"one with --openai-chat-template FILE)")
        return cls(templates, _token(config.get("bos_token")),
                   _token(config.get("eos_token")), tokenizer)

    def render(self, messages: list[dict[str, Any]], tools: list | None = None,
               add_generation_prompt: bool = True) -> str:
        """The prompt of `messages`; ValueError with the template's own words when it
        refuses them (`raise_exception`) or fails."""
        template = self._compiled.get(bool(tools)) or self._compiled.get(False) \
            or self._compiled[True]
        try:
            return template.render(messages=messages, tools=tools,
                                   add_generation_prompt=add_generation_prompt,
                                   bos_token=self.bos_token, eos_token=self.eos_token)
        except TemplateRaised as exc:
            raise ValueError(str(exc)) from None
        except Exception as exc:  # a template's bug: a name it lacks, a type error
            raise ValueError(f"the chat template failed: {exc}") from None

    def token_counts(self, texts: list[str]) -> list[int] | None:
        """The tokenizer's count of each text (None without a tokenizer.json); with
        `encode_batch`, which lets go of the GIL while it works (`encode` does not)."""
        if self._tokenizer is None:
            return None
        encoded = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return [len(encoding.ids) for encoding in encoded]


class TemplateRaised(Exception):
    """A template's own `raise_exception(message)`."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / "tokenizer_config.json"
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ChatTemplateError(f"{path}: cannot be read as JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ChatTemplateError(f"{path}: expected a JSON object")
    return value


def _load_tokenizer(folder: Path) -> Any:
    """`tokenizer.json` with the `tokenizers` package (None when the folder has none)."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ChatTemplateError(f"--openai-tokenizer needs tokenizers: {EXTRA_HINT}") \
            from None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ChatTemplateError(f"{path}: not a tokenizer the tokenizers package reads: "
                                f"{exc}") from None
