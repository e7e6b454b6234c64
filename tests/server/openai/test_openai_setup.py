"""The OpenAI endpoint without a server: its flags' checks, a tokenizer folder that
cannot serve, the tokenizer loaded once from the flags to the endpoint, chat refused
without a template (in process, no model needed)."""

from __future__ import annotations

import json

import pytest

from llm_models import write_tokenizer
from pbserve.cli.openai_flags import openai_options
from pbserve.cli.parser import build_parser, check_flags
from pbserve.server.http.messages import HttpRequest
from pbserve.server.openai.chat_template import ChatTemplate, ChatTemplateError
from pbserve.server.openai.endpoint import Endpoint
from pbserve.server.openai.options import OpenAIOptions
from pbserve.server.listener import Listener
from pbserve.server.openai.routes import OpenAIRoutes
from pbserve.server.openai.server import start_openai_server


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


async def test_the_tokenizer_is_loaded_once_from_the_flags_to_the_endpoint(
        tmp_path, monkeypatch):
    loads = []
    real_load = ChatTemplate.load

    def counted_load(*args):
        loads.append(args)
        return real_load(*args)

    monkeypatch.setattr(ChatTemplate, "load", counted_load)
    tokenizer = str(write_tokenizer(tmp_path / "tok"))
    parser = build_parser()
    args = parser.parse_args(["--model-repository", str(tmp_path), "--openai-port", "0",
                              "--openai-tokenizer", tokenizer])
    check_flags(parser, args)  # loads it (a bad one is refused here, before models load)
    options = openai_options(args)
    assert loads == [(tokenizer, None)] and options.template is not None
    server = await start_openai_server(None, options, listener=Listener.bind(
        "OpenAI", "127.0.0.1", 0))
    try:
        assert len(loads) == 1  # the endpoint serves with the template the check loaded
    finally:
        await server.close()


def test_template_renders_and_refuses_with_its_own_words(tmp_path):
    template = ChatTemplate.load(str(write_tokenizer(tmp_path / "tok")), None)
    assert template.render([{"role": "user", "content": "hi"}]) == \
        "<s><|user|> hi <|assistant|>"
    assert template.token_counts(["a b c", "", "d"]) == [3, 0, 1]
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
