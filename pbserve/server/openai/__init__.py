"""An OpenAI-compatible endpoint (`--openai-port`): /v1/models, /v1/completions,
/v1/chat/completions, /v1/embeddings, as Triton's OpenAI frontend (server repository,
python/openai/) answers them, on pbserve's own HTTP stack (server/http/: its connection,
its messages) and the same InferenceCore as the KServe endpoints (docs/openai.md).

One concept a module: `options.py` (the flags), `server.py` (the listener), `routes.py`
(paths and errors), `errors.py` (OpenAI's error body), `body.py` (reading a request's
fields), `conventions.py` (which input convention a model takes: vLLM, TensorRT-LLM),
`tensors.py` (tensors in and out), `chat_template.py` (a tokenizer's chat template),
`completions.py`, `chat.py`, `embeddings.py`, `models.py` (the endpoints),
`generation.py` (running a generation request, n of them), `sse.py` (server-sent
events), `usage.py` (token counts), `tool_calls.py` (the llama3 and mistral parsers).
"""
