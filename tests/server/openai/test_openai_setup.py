"""The OpenAI endpoint without a server: its flags' checks, a tokenizer folder that
cannot serve, chat refused without a template (in process, no model needed)."""

from __future__ import annotations

import json

import pytest

from llm_models import write_tokenizer
from pbserve.cli.parser import build_parser, check_flags
from pbserve.server.http.messages import HttpRequest
from pbserve.server.openai.chat_template import ChatTemplate, ChatTemplateError
from pbserve.server.openai.endpoint import Endpoint
from pbserve.server.openai.options import OpenAIOptions
from pbserve.server.openai.routes import OpenAIRoutes


def flag_error(capsys, *flags: str) -> str:
    parser = build_parser()
    args = parser.parse_args(["--model-repository", "/tmp", *flags])
    with pytest.raises(SystemExit):
        check_flags(parser, args)
    return capsys.readouterr().err


def test_openai_flags_are_checked(capsys, tmp_path):
    assert "--openai-tokenizer needs --openai-port" in flag_error(
        capsys, "--openai-tokenizer", str(tmp_path))
    assert "not a folder" in flag_error(capsys, "--openai-port", "9000",
                                        "--openai-tokenizer", str(tmp_path / "none"))
    assert "has no chat_template" in flag_error(capsys, "--openai-port", "9000",
                                                "--openai-tokenizer", str(tmp_path))


def test_template_renders_and_refuses_with_its_own_words(tmp_path):
    template = ChatTemplate.load(str(write_tokenizer(tmp_path / "tok")), None)
    assert template.render([{"role": "user", "content": "hi"}]) == \
        "<s><|user|> hi <|assistant|>"
    assert template.count_tokens("a b c") == 3
    strict = ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ValueError, match="roles must alternate"):
        strict.render([])
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatTemplate("{% for %}")


async def test_chat_without_a_template_is_refused_clearly():
    endpoint = Endpoint(None, None, OpenAIOptions("127.0.0.1", 0), None, 1 << 20)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    reply = await OpenAIRoutes(endpoint)(HttpRequest(
        b"POST", "/v1/chat/completions", b"", {}, body.encode()))
    assert reply.status == 500
    message = json.loads(b"".join(reply.body))["error"]["message"]
    assert "--openai-tokenizer" in message and "--openai-chat-template" in message
