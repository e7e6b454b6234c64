"""Mock LLM models for the OpenAI endpoint's tests, one per request convention, written
into a repository by `write_repository`: `vllm_llm` (backend "vllm", served by the
model.py in its version folder: the vLLM backend's inputs and outputs), `trtllm_llm`
(TensorRT-LLM's inputs), `plain_llm` (Triton's mock_llm: text_input and stream in,
text_output out, an `async def execute`), `embedder` (a float embedding of text).

A generation model answers `w0 w1 ...` (max_tokens of them, stopping before a stop
word); its prompt may ask for more: PARAMS (answer the parameters it received, as
JSON), FAIL (an error after two tokens), SLOW (a token every 20 ms, for up to 40 s,
until cancelled: then the file `cancelled` appears in the model's folder), TOOLCALL
(a llama3 tool call, in pieces). `wrong_output_llm` streams `w0 `, then a `text_output`
of FP32 (a model's bug the endpoint must report, not a string).
"""

from __future__ import annotations

from pathlib import Path

_MODEL = r'''
import asyncio
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
TOOL_CALL = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'


def value(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)


def text(request, name):
    found = value(request, name)
    return None if found is None else found[0].decode()


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]

    def settings(self, request):
        """(max_tokens, stop words, echo, the parameters seen)"""
        seen = {}
        if CONVENTION == "vllm":
            seen = json.loads(text(request, "sampling_parameters"))
            stop = seen.get("stop") or []
            stop = [stop] if isinstance(stop, str) else stop
            echo = not bool(value(request, "exclude_input_in_output")[0])
            return seen["max_tokens"], stop, echo, seen
        if CONVENTION == "trtllm":
            for name in ("max_tokens", "temperature", "top_p", "seed", "frequency_penalty",
                         "presence_penalty"):
                found = value(request, name)
                if found is not None:
                    seen[name] = found[0].item()
            stop_words = value(request, "stop_words")
            if stop_words is not None:
                seen["stop_words"] = [s.decode() for s in stop_words]
            guide = text(request, "guided_decoding_guide")
            if guide is not None:
                seen["guide"] = guide
            return seen["max_tokens"], seen.get("stop_words", []), False, seen
        return 8, [], False, seen

    def tokens(self, prompt, max_tokens, stop, seen):
        if "PARAMS" in prompt:
            return [json.dumps(seen, sort_keys=True)]
        if "TOOLCALL" in prompt:
            return [TOOL_CALL[i:i + 9] for i in range(0, len(TOOL_CALL), 9)]
        if CONVENTION == "plain":
            return [word + " " for word in prompt.split()]
        words = []
        for i in range(max_tokens):
            if f"w{i}" in stop:
                break
            words.append(f"w{i} ")
        return words

    def response(self, out, prompt_tokens, output_tokens):
        tensors = [pb_utils.Tensor("text_output", np.array([out.encode()], dtype=object))]
        if CONVENTION != "plain":
            dtype = np.uint32 if CONVENTION == "vllm" else np.int32
            tensors += [pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], dtype)),
                        pb_utils.Tensor("num_output_tokens", np.array([output_tokens], dtype))]
        return pb_utils.InferenceResponse(tensors)

    async def execute(self, requests):
        await asyncio.gather(*(self.run(request) for request in requests))
        return None

    async def run(self, request):
        sender = request.get_response_sender()
        prompt = text(request, "text_input")
        stream = bool(value(request, "stream")[0])
        max_tokens, stop, echo, seen = self.settings(request)
        prompt_tokens = len(prompt.split())
        if "SLOW" in prompt:
            for i in range(2000):
                if request.is_cancelled():
                    open(os.path.join(self.folder, "cancelled"), "w").close()
                    sender.send(flags=FINAL)
                    return
                sender.send(self.response(f"w{i} ", prompt_tokens, 1))
                await asyncio.sleep(0.02)
            sender.send(flags=FINAL)
            return
        tokens = self.tokens(prompt, max_tokens, stop, seen)
        if echo:
            tokens = [prompt] + tokens
        if not stream:
            if "FAIL" in prompt:
                sender.send(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("the mock failed")), flags=FINAL)
                return
            sender.send(self.response("".join(tokens), prompt_tokens, len(tokens)),
                        flags=FINAL)
            return
        for i, token in enumerate(tokens):
            if "FAIL" in prompt and i == 2:
                sender.send(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("the mock failed at token 2")), flags=FINAL)
                return
            last = i == len(tokens) - 1 and CONVENTION == "vllm"
            sender.send(self.response(token, prompt_tokens, 1), flags=FINAL if last else 0)
        if CONVENTION != "vllm" or not tokens:
            sender.send(flags=FINAL)
'''

_BOOL = 'data_type: TYPE_BOOL dims: [ 1 ] optional: true'
_PLAIN = '''
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1, 1 ] }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1, -1 ] } ]
'''  # text_input -> text_output, streamed
_CONFIGS = {
    "vllm_llm": f'''
backend: "vllm"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "stream" {_BOOL} }},
  {{ name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }},
  {{ name: "exclude_input_in_output" {_BOOL} }},
  {{ name: "return_num_input_tokens" {_BOOL} }},
  {{ name: "return_num_output_tokens" {_BOOL} }},
  {{ name: "return_logprobs" {_BOOL} }}
]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }},
  {{ name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }},
  {{ name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }}
]
''',
    "trtllm_llm": '''
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1, 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] },
  { name: "stop_words" data_type: TYPE_STRING dims: [ 1, -1 ] optional: true },
  { name: "temperature" data_type: TYPE_FP32 dims: [ 1, 1 ] optional: true },
  { name: "top_p" data_type: TYPE_FP32 dims: [ 1, 1 ] optional: true },
  { name: "seed" data_type: TYPE_UINT64 dims: [ 1, 1 ] optional: true },
  { name: "guided_decoding_guide" data_type: TYPE_STRING dims: [ 1, 1 ] optional: true },
  { name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1, 1 ] optional: true },
  { name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1, 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ 1, -1 ] },
  { name: "num_input_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] },
  { name: "num_output_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] }
]
''',
    "plain_llm": _PLAIN,
    "wrong_output_llm": _PLAIN,  # the plain model's config; its model.py answers FP32
    "embedder": '''
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "embedding" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "num_input_tokens" data_type: TYPE_INT32 dims: [ 1 ] }
]
''',
}

_EMBEDDER = r'''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0]
            text = text.decode()
            vector = np.array([len(text), text.count("a"), 0.5], dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("embedding", vector),
                pb_utils.Tensor("num_input_tokens",
                                np.array([len(text.split())], dtype=np.int32))]))
        return responses
'''

_WRONG_OUTPUT = r'''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("text_output", np.array([b"w0 "], dtype=object))]))
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("text_output", np.array([1.5], dtype=np.float32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

_SOURCES = {"embedder": _EMBEDDER, "wrong_output_llm": _WRONG_OUTPUT}
_CONVENTIONS = {"vllm_llm": "vllm", "trtllm_llm": "trtllm", "plain_llm": "plain"}


def write_repository(root: Path) -> Path:
    """The five models under `root`; returns it."""
    for name, config in _CONFIGS.items():
        version = root / name / "1"
        version.mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        source = _SOURCES.get(name) or f"CONVENTION = {_CONVENTIONS[name]!r}\n" + _MODEL
        (version / "model.py").write_text(source)
    return root


def write_tokenizer(folder: Path) -> Path:
    """A tiny word-level tokenizer (every word one token) with a chat template, as
    Hugging Face writes a tokenizer folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True)
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(folder / "tokenizer.json"))
    template = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}"
                " {% endfor %}{% if tools %}TOOLS {{ tools | map(attribute='function.name')"
                " | join(',') }} {% endif %}{% if add_generation_prompt %}<|assistant|>"
                "{% endif %}")
    (folder / "tokenizer_config.json").write_text(
        '{"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": '
        + __import__("json").dumps(template) + "}")
    return folder
