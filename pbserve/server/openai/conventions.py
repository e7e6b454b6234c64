"""Which inputs a model takes a generation request in, chosen as Triton's frontend
chooses: the vLLM convention for a model of `backend: "vllm"`, TensorRT-LLM's for every
other (a TensorRT-LLM model or BLS, an ensemble, a plain Python model such as Triton's
`mock_llm`), unless `--openai-backend` names one for all.

vLLM: `text_input`, `stream`, `exclude_input_in_output` (not `echo`),
`sampling_parameters` (the request's sampling fields as a JSON string, `max_tokens`
always), `return_num_input_tokens` / `return_num_output_tokens`, `return_logprobs`.
TensorRT-LLM: `text_input`, `stream`, `max_tokens`, `stop_words`, `temperature`,
`top_p`, `frequency_penalty`, `presence_penalty`, `seed`, `exclude_input_in_output`
(when `echo` is given), `guided_decoding_guide_type` / `guided_decoding_guide` (a named
tool's parameters), `return_num_input_tokens` / `return_num_output_tokens`.

pbserve's rule where Triton has none: only the inputs the model declares are sent (Triton
sends them all, and a model without them refuses the request), each in the datatype and
shape the model declares; `text_input` is required.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pbserve.core.api import InferenceCore, ModelHandle
from pbserve.core.types import InferRequest
from pbserve.errors import ErrorCode, ServerError
from pbserve.server.openai.errors import OpenAIError, bad_request
from pbserve.server.openai.tensors import input_tensor

VLLM = "vllm"
TENSORRT_LLM = "tensorrtllm"
ECHO_INPUTS = ("exclude_input_in_output", "sampling_param_exclude_input_from_output")


@dataclass
class Generation:
    """What a completion or chat request asks of the model, read from its body."""

    model: str
    prompt: str
    stream: bool
    max_tokens: int
    sampling: dict[str, Any]  # the vLLM sampling parameters the client set
    stop: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    seed: int | None = None
    echo: bool | None = None
    guided_json: str | None = None  # the parameters of the tool the client named
    parameters: dict[str, Any] = field(default_factory=dict)


class ModelPlan:
    """One model as the OpenAI endpoint sends it requests: its convention, its inputs."""

    def __init__(self, name: str, convention: str, inputs: dict[str, dict[str, Any]],
                 outputs: dict[str, dict[str, Any]]) -> None:
        self.name = name
        self.convention = convention
        self.inputs = inputs
        self.outputs = outputs
        self.echo_input = next((n for n in ECHO_INPUTS if n in inputs), None)

    @classmethod
    def of(cls, name: str, metadata: dict[str, Any], backend: str | None) -> ModelPlan:
        """`metadata`: the model's KServe metadata, whose platform is its backend."""
        convention = backend or (VLLM if metadata.get("platform") == VLLM
                                 else TENSORRT_LLM)
        return cls(name, convention, {i["name"]: i for i in metadata.get("inputs", [])},
                   {o["name"]: o for o in metadata.get("outputs", [])})

    @property
    def echoes(self) -> bool:
        """The model itself puts the prompt before its output when asked."""
        return self.echo_input is not None

    def generation_request(self, generation: Generation) -> InferRequest:
        if "text_input" not in self.inputs:
            raise bad_request(f"model '{self.name}' has no input 'text_input': the OpenAI "
                              f"endpoint sends the prompt as text_input (vLLM and "
                              f"TensorRT-LLM conventions)")
        values = (self._vllm_inputs if self.convention == VLLM
                  else self._tensorrt_llm_inputs)(generation)
        request = InferRequest(model_name=self.name)
        request.inputs = [input_tensor(name, self.inputs[name], value)
                          for name, value in values.items() if name in self.inputs]
        request.parameters.update(generation.parameters)
        return request

    def _vllm_inputs(self, g: Generation) -> dict[str, list[Any]]:
        sampling = dict(g.sampling)
        sampling["max_tokens"] = g.max_tokens
        if g.guided_json is not None:
            sampling["structured_outputs"] = json.dumps({"json": g.guided_json})
        values: dict[str, list[Any]] = {
            "text_input": [g.prompt], "stream": [g.stream],
            "sampling_parameters": [json.dumps(sampling)],
            "return_num_input_tokens": [True], "return_num_output_tokens": [True],
            "return_logprobs": [False]}
        if self.echo_input is not None:
            values[self.echo_input] = [not g.echo]
        return values

    def _tensorrt_llm_inputs(self, g: Generation) -> dict[str, list[Any]]:
        values: dict[str, list[Any]] = {"text_input": [g.prompt], "stream": [g.stream],
                                        "max_tokens": [g.max_tokens]}
        if g.stop:
            values["stop_words"] = list(g.stop)
        for name in ("top_p", "frequency_penalty", "presence_penalty", "seed",
                     "temperature"):
            value = getattr(g, name)
            if value is not None:
                values[name] = [value]
        if g.echo is not None and self.echo_input is not None:
            values[self.echo_input] = [not g.echo]
        if g.guided_json is not None:
            values["guided_decoding_guide_type"] = ["json_schema"]
            values["guided_decoding_guide"] = [g.guided_json]
        values["return_num_input_tokens"] = [True]
        values["return_num_output_tokens"] = [True]
        return values

    def embedding_request(self, text: Any, dimensions: int | None) -> InferRequest:
        """vLLM: `embedding_request`, JSON of the input and its pooling parameters;
        another model: the text as `text_input` (pbserve's; Triton refuses them)."""
        request = InferRequest(model_name=self.name)
        if "embedding_request" in self.inputs:
            pooling = {"dimensions": [dimensions]} if dimensions is not None else {}
            values = {"embedding_request": [json.dumps({"input": text,
                                                        "pooling_params": pooling})],
                      "return_num_input_tokens": [True],
                      "return_num_output_tokens": [True]}
        elif "text_input" in self.inputs and isinstance(text, str):
            values = {"text_input": [text], "return_num_input_tokens": [True]}
        else:
            raise bad_request(f"model '{self.name}' takes no embedding request: it needs "
                              f"an input 'embedding_request' (vLLM) or 'text_input' (a "
                              f"string input, one request per string)")
        request.inputs = [input_tensor(name, self.inputs[name], value)
                          for name, value in values.items() if name in self.inputs]
        return request


class ModelPlans:
    """The plan of each model a request names, made again only when its metadata
    changed (a reload with another config)."""

    def __init__(self, core: InferenceCore, backend: str | None) -> None:
        self._core = core
        self._backend = backend
        self._plans: dict[str, tuple[dict[str, Any], ModelPlan]] = {}

    def resolve(self, name: str) -> tuple[ModelHandle, ModelPlan]:
        """The model's handle and plan; Triton's 400 `Unknown model: <name>`."""
        try:
            handle = self._core.model_handle(name)
            metadata = self._core.model_metadata(name)
        except ServerError as exc:
            if exc.code == ErrorCode.NOT_FOUND:
                raise bad_request(f"Unknown model: {name}", "model") from None
            raise OpenAIError.from_server_error(exc) from None
        cached = self._plans.get(name)
        if cached is not None and cached[0] == metadata:
            return handle, cached[1]
        plan = ModelPlan.of(name, metadata, self._backend)
        self._plans[name] = (metadata, plan)
        return handle, plan
