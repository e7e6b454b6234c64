"""The OpenAI endpoint of a server with --frontend-processes 2 (the core's process keeps
the OpenAI listener, the frontend processes serve HTTP and gRPC): README's OpenAI
example (its `pbserve` command, with frontend processes and explicit model control
added, and its client snippet, run as written but for the port), a completion not
streamed, /metrics, and Triton's frontend's statuses for the load and unload of a model
the repository does not hold."""

from __future__ import annotations

import contextlib
import io
import urllib.request
from pathlib import Path

import pytest
from doc_commands import extract
from doc_runner import flag_value, set_flag
from openai_server import post, running_openai_server

ROOT = Path(__file__).resolve().parents[3]
README_PORT = "9000"


def readme_example() -> tuple[list[str], str]:
    """README's OpenAI server command (its arguments) and its client snippet."""
    commands, snippets = extract(ROOT)
    [command] = [c for c in commands if c.path == "README.md" and "--openai-port" in c.argv]
    [snippet] = [s for s in snippets if s.path == "README.md" and "openai" in s.key]
    return list(command.argv[1:]), snippet.code


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    args, _ = readme_example()
    for flag in ("--model-repository", "--openai-chat-template"):  # from the checkout
        args = set_flag(args, flag, str(ROOT / flag_value(args, flag)))
    with running_openai_server([], [*args, "--frontend-processes", "2",
                                    "--model-control-mode", "explicit", "--load-model", "*"],
                               tmp_path_factory.mktemp("openai_fp") / "server.log") as server:
        yield server


def test_readme_example_streams_a_chat_through_the_core(server):
    _, code = readme_example()
    code = code.replace(f"127.0.0.1:{README_PORT}", server.openai_url.split("//")[1])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {})
    assert printed.getvalue().rstrip() == "user: Hello! assistant:"  # as README says


def test_completion_not_streamed_and_streamed(client):
    answer = client.completions.create(model="echo_llm", prompt="one two three")
    assert answer.choices[0].text == "one two three "
    assert answer.choices[0].finish_reason == "stop"
    chunks = list(client.completions.create(model="echo_llm", prompt="a b c", stream=True))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert texts == ["a ", "b ", "c ", ""]  # a chunk per response, as the model sent them
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_metrics_of_the_openai_port_have_triton_cpu_gauges(server):
    with urllib.request.urlopen(server.openai_url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    assert "\nnv_cpu_utilization " in text and "\nnv_cpu_memory_used_bytes " in text
    assert 'nv_inference_request_success{model="echo_llm",version="1"}' in text


def test_unknown_model_load_is_500_and_unload_400_as_triton_frontend(server):
    status, body = post(server, "/v1/models/unknown_model/load")
    assert status == 500
    assert body["detail"] == ("Failed to load model 'unknown_model': failed to load "
                              "'unknown_model', failed to poll from model repository")
    assert body["error"]["type"] == "server_error"
    status, body = post(server, "/v1/models/unknown_model/unload")
    assert (status, body["detail"]) == (400, "Unknown model: unknown_model")
    status, body = post(server, "/v1/models/%20%20/load")  # a bad name is the client's
    assert status == 400 and "Model name cannot be empty" in body["detail"]
