"""The OpenAI-compatible endpoint (--openai-port), driven with the official `openai`
client (sync and async, streamed and not) against one real server holding a mock LLM
of each request convention (llm_models.py): vLLM, TensorRT-LLM, plain text_input /
text_output, and an embedding model."""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.request

import numpy as np
import openai
import pytest

from llm_models import write_repository, write_tokenizer
from openai_server import post, running_openai_server

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "the weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("openai")
    repo = write_repository(root / "models")
    tokenizer = write_tokenizer(root / "tokenizer")
    with running_openai_server([repo], ["--openai-tokenizer", str(tokenizer),
                                        "--openai-tool-call-parser", "llama3"],
                               root / "server.log") as server:
        server.repo = repo
        yield server


@pytest.fixture
async def async_client(server):
    async with openai.AsyncOpenAI(base_url=server.openai_url + "/v1", api_key="none",
                                  max_retries=0) as client:
        yield client


# --- models and health -----------------------------------------------------------------

def test_models_are_listed_and_retrieved(client, server):
    ids = [model.id for model in client.models.list()]
    assert ids == ["embedder", "plain_llm", "trtllm_llm", "vllm_llm", "wrong_output_llm"]
    model = client.models.retrieve("vllm_llm")
    assert (model.object, model.owned_by) == ("model", "Triton Inference Server")
    assert model.created > 0
    with pytest.raises(openai.NotFoundError, match="Unknown model: nope"):
        client.models.retrieve("nope")
    with urllib.request.urlopen(server.openai_url + "/health/ready", timeout=5) as ready:
        assert ready.status == 200


# --- completions -----------------------------------------------------------------------

def test_vllm_completion_with_usage_max_tokens_and_stop(client):
    answer = client.completions.create(model="vllm_llm", prompt="one two three",
                                       max_tokens=4)
    assert answer.object == "text_completion" and answer.id.startswith("cmpl-")
    assert [c.text for c in answer.choices] == ["w0 w1 w2 w3 "]
    assert answer.choices[0].finish_reason == "stop"
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens,
            answer.usage.total_tokens) == (3, 4, 7)
    stopped = client.completions.create(model="vllm_llm", prompt="x", stop=["w2"])
    assert stopped.choices[0].text == "w0 w1 "
    default = client.completions.create(model="vllm_llm", prompt="x")
    assert default.usage.completion_tokens == 16  # --openai-default-max-tokens


def test_n_choices_are_n_requests(client):
    answer = client.completions.create(model="trtllm_llm", prompt="a b", max_tokens=3, n=3)
    assert sorted(c.index for c in answer.choices) == [0, 1, 2]
    assert {c.text for c in answer.choices} == {"w0 w1 w2 "}
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (2, 9)
    chunks = list(client.completions.create(model="trtllm_llm", prompt="a", max_tokens=2,
                                            n=2, stream=True))
    texts = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == {0: "w0 w1 ", 1: "w0 w1 "}


def test_vllm_sampling_parameters_and_echo(client):
    answer = client.completions.create(
        model="vllm_llm", prompt="PARAMS", temperature=0.5, top_p=0.9, max_tokens=7,
        stop="x", seed=3, extra_body={"top_k": 5})
    assert json.loads(answer.choices[0].text) == {
        "max_tokens": 7, "seed": 3, "stop": "x", "temperature": 0.5, "top_k": 5,
        "top_p": 0.9}
    echoed = client.completions.create(model="vllm_llm", prompt="hi", max_tokens=1,
                                       echo=True)
    assert echoed.choices[0].text == "hiw0 "  # the model echoes (exclude_input_in_output)
    plain = client.completions.create(model="plain_llm", prompt="hi there", echo=True)
    assert plain.choices[0].text == "hi therehi there "  # echoed by the endpoint


def test_tensorrt_llm_inputs(client):
    answer = client.completions.create(model="trtllm_llm", prompt="PARAMS", max_tokens=9,
                                       temperature=0.25, top_p=0.5, seed=11,
                                       stop=["a", "b"], presence_penalty=1.0)
    # presence_penalty is not one of the model's inputs: not sent
    assert json.loads(answer.choices[0].text) == {
        "max_tokens": 9, "seed": 11, "stop_words": ["a", "b"], "temperature": 0.25,
        "top_p": 0.5}


async def test_async_streamed_completion_with_usage(async_client):
    stream = await async_client.completions.create(
        model="trtllm_llm", prompt="p q r s", max_tokens=3, stream=True,
        stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "w0 w1 w2 "
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (4, 3)


# --- chat --------------------------------------------------------------------------------

def test_chat_renders_the_tokenizers_template(client):
    stream = client.chat.completions.create(
        model="plain_llm", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": "be brief"},
                  {"role": "user", "content": "hello"}])
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # plain_llm answers the words of its prompt: the template's rendering
    assert text == "<s><|system|> be brief <|user|> hello <|assistant|> "
    assert chunks[-2].choices[0].finish_reason == "stop"
    # plain_llm reports no token counts: the tokenizer counts (one token a word)
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (6, 6)


async def test_async_chat_not_streamed(async_client):
    answer = await async_client.chat.completions.create(
        model="vllm_llm", max_completion_tokens=2, max_tokens=9,
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert answer.object == "chat.completion"
    message = answer.choices[0].message
    assert (message.role, message.content, message.tool_calls) == ("assistant", "w0 w1 ",
                                                                   None)
    assert answer.usage.completion_tokens == 2


def test_tool_calls_parsed_and_named(client):
    messages = [{"role": "user", "content": "TOOLCALL please"}]
    answer = client.chat.completions.create(model="trtllm_llm", messages=messages,
                                            tools=TOOLS)
    (call,) = answer.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather", {"city": "Paris"})
    assert answer.choices[0].finish_reason == "tool_calls"
    chunks = list(client.chat.completions.create(model="trtllm_llm", messages=messages,
                                                 tools=TOOLS, stream=True))
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    assert [c[0].function.name for c in calls] == ["get_weather"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    named = client.chat.completions.create(
        model="trtllm_llm", tools=TOOLS, messages=[{"role": "user", "content": "PARAMS"}],
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (call,) = named.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    seen = json.loads(call.function.arguments)  # the model saw the tool's parameters
    assert json.loads(seen["guide"]) == TOOLS[0]["function"]["parameters"]


# --- errors and cancellation ---------------------------------------------------------

def test_model_error_mid_stream_and_not_streamed(client):
    stream = client.completions.create(model="trtllm_llm", prompt="FAIL", stream=True)
    texts = []
    with pytest.raises(openai.APIError, match="the mock failed at token 2"):
        for chunk in stream:
            texts.append(chunk.choices[0].text)
    assert texts == ["w0 ", "w1 "]
    with pytest.raises(openai.InternalServerError, match="the mock failed"):
        client.chat.completions.create(model="vllm_llm",
                                       messages=[{"role": "user", "content": "FAIL"}])


WRONG_OUTPUT = "the model's 'text_output' is FP32, expected BYTES (a string)"


def test_unreadable_response_mid_stream_ends_with_an_error_event_and_done(client, server):
    stream = client.completions.create(model="wrong_output_llm", prompt="x", stream=True)
    texts = []
    with pytest.raises(openai.APIError, match=re.escape(WRONG_OUTPUT)):
        for chunk in stream:
            texts.append(chunk.choices[0].text)
    assert texts == ["w0 "]
    for n in (1, 2):  # one stream, and n streams merged
        request = urllib.request.Request(
            server.openai_url + "/v1/chat/completions", headers={
                "Content-Type": "application/json"}, data=json.dumps({
                    "model": "wrong_output_llm", "stream": True, "n": n,
                    "messages": [{"role": "user", "content": "x"}]}).encode())
        with urllib.request.urlopen(request, timeout=10) as response:
            events = response.read().decode().split("\n\n")  # the whole chunked body
        assert events[-2:] == ["data: [DONE]", ""]
        error = json.loads(events[-3].removeprefix("data: "))["error"]
        assert (error["message"], error["type"], error["code"]) == (
            WRONG_OUTPUT, "server_error", "500")
    with pytest.raises(openai.InternalServerError, match=re.escape(WRONG_OUTPUT)):
        client.completions.create(model="wrong_output_llm", prompt="x")


def test_unknown_model_and_bad_requests(client, server):
    with pytest.raises(openai.BadRequestError, match="Unknown model: nope"):
        client.completions.create(model="nope", prompt="x")
    with pytest.raises(openai.BadRequestError, match="'max_tokens' must be an integer"):
        client.completions.create(model="vllm_llm", prompt="x", max_tokens="many")
    with pytest.raises(openai.BadRequestError, match="stream_options"):
        client.completions.create(model="vllm_llm", prompt="x",
                                  stream_options={"include_usage": True})
    with pytest.raises(openai.BadRequestError, match="--openai-tool-call-parser|tools"):
        client.chat.completions.create(model="vllm_llm", tools=TOOLS,
                                       tool_choice={"type": "function",
                                                    "function": {"name": "other"}},
                                       messages=[{"role": "user", "content": "x"}])
    status, body = post(server, "/v1/completions", b"{not json")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert body["detail"] == body["error"]["message"]
    status, body = post(server, "/v1/chat/completions",
                        b'{"model": "vllm_llm", "messages": []}')
    assert (status, body["error"]["param"]) == (400, "messages")
    status, body = post(server, "/v1/nothing", b"{}")
    assert status == 404


def test_disconnect_mid_stream_cancels_the_model_request(client, server):
    marker = server.repo / "vllm_llm" / "cancelled"
    stream = client.completions.create(model="vllm_llm", prompt="SLOW", stream=True)
    for i, chunk in enumerate(stream):
        if i == 2:
            break
    stream.close()
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the model never saw its request cancelled"


# --- embeddings, statistics ----------------------------------------------------------

def test_embeddings_as_floats_and_base64(client):
    answer = client.embeddings.create(model="embedder", input=["abc", "aaa b"])
    assert [d.embedding for d in answer.data] == [[3.0, 1.0, 0.5], [5.0, 3.0, 0.5]]
    assert answer.usage.prompt_tokens == 3
    packed = client.embeddings.with_raw_response.create(
        model="embedder", input="aa", encoding_format="base64").http_response.json()
    vector = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), "<f4")
    assert vector.tolist() == [2.0, 2.0, 0.5]
    with pytest.raises(openai.BadRequestError, match="token ids"):
        client.embeddings.create(model="embedder", input=[1, 2, 3])


def test_requests_are_counted_in_the_models_statistics(client, server):
    before = server.http_client().get_inference_statistics("embedder")
    client.embeddings.create(model="embedder", input=["a", "b"])
    after = server.http_client().get_inference_statistics("embedder")
    count = [stats["inference_count"] for stats in (before, after)
             for stats in stats["model_stats"]]
    assert count[1] - count[0] == 2
