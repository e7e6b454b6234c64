"""A streamed generation of 256 tokens through the OpenAI endpoint's chat completions
against Triton's KServe `generate_stream` on the same model, in one run:

    python bench/openai_stream.py [--tokens 256] [--runs-fast 30] [--runs-slow 4]

Starts pbserve (this checkout) with two decoupled models that stream `--tokens` tokens,
one every 0 ms and one every 10 ms, and `--openai-port`. For each model it alternates
the two paths run by run (same client: http.client reading the server-sent events as
they come), and prints, side by side, the median time to first token (request sent to
the first event carrying text) and tokens/s (tokens over the time from sending to the
last token), with the OpenAI path's ratio to generate_stream's (TTFT ratio below 1.2
and rate ratio above 1/1.2 are "within 1.2x"). Nothing is asserted; other load on the
machine moves the figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pbserve.testing import RunningServer, free_ports  # noqa: E402

MODEL = r'''
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils

DELAY_S = {delay}


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "max_tokens")
                        .as_numpy().reshape(-1)[0])
            for i in range(count):
                token = np.array([b"tok%d " % i], dtype=object)
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("text_output", token)]))
                if DELAY_S:
                    await asyncio.sleep(DELAY_S)
                else:
                    await asyncio.sleep(0)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

CONFIG = '''
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
'''

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def write_models(root: Path) -> dict[str, float]:
    delays = {"tokens_0ms": 0.0, "tokens_10ms": 0.010}
    for name, delay in delays.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG)
        (root / name / "1" / "model.py").write_text(MODEL.format(delay=delay))
    return delays


def stream(port: int, path: str, body: dict) -> tuple[float, float, int]:
    """(time to first token, time to last token, tokens) of one streamed request."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = json.dumps(body).encode()
    start = time.perf_counter()
    connection.request("POST", path, data, {"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200, response.read()
    first = last = 0.0
    tokens = 0
    while True:
        line = response.readline()
        if not line:
            break
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        event = json.loads(line[6:])
        text = event.get("text_output")
        if text is None and event.get("choices"):
            text = event["choices"][0].get("delta", {}).get("content")
        if text:
            now = time.perf_counter()
            first = first or now
            last = now
            tokens += 1
    connection.close()
    return first - start, last - start, tokens


def measure(server_ports: tuple[int, int], model: str, tokens: int, runs: int
            ) -> dict[str, tuple[float, float]]:
    http_port, openai_port = server_ports
    kserve = (http_port, f"/v2/models/{model}/generate_stream",
              {"text_input": "go", "max_tokens": tokens, "stream": True})
    chat = (openai_port, "/v1/chat/completions",
            {"model": model, "messages": [{"role": "user", "content": "go"}],
             "max_tokens": tokens, "stream": True})
    results: dict[str, list[tuple[float, float, int]]] = {"kserve": [], "openai": []}
    for name, (port, path, body) in (("kserve", kserve), ("openai", chat)):
        stream(port, path, body)  # warm-up
    for _ in range(runs):
        for name, (port, path, body) in (("kserve", kserve), ("openai", chat)):
            result = stream(port, path, body)
            assert result[2] == tokens, f"{name} streamed {result[2]} of {tokens} tokens"
            results[name].append(result)
    return {name: (statistics.median(r[0] for r in got),
                   statistics.median(r[2] / r[1] for r in got))
            for name, got in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--runs-fast", type=int, default=30)
    parser.add_argument("--runs-slow", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        delays = write_models(root / "models")
        (root / "template.jinja").write_text(TEMPLATE)
        (openai_port,) = free_ports(1)
        server = RunningServer([root / "models"], [
            "--openai-port", str(openai_port),
            "--openai-chat-template", str(root / "template.jinja")])
        try:
            server.wait_ready()
            print(f"{args.tokens} tokens a stream; medians; OpenAI = /v1/chat/completions, "
                  f"KServe = generate_stream")
            print(f"{'model':<12} {'KServe TTFT':>12} {'OpenAI TTFT':>12} {'ratio':>6}   "
                  f"{'KServe tok/s':>12} {'OpenAI tok/s':>12} {'ratio':>6}")
            for model, delay in delays.items():
                runs = args.runs_fast if delay == 0 else args.runs_slow
                got = measure((server.http_port, openai_port), model, args.tokens, runs)
                (k_ttft, k_rate), (o_ttft, o_rate) = got["kserve"], got["openai"]
                print(f"{model:<12} {k_ttft * 1e3:>10.2f}ms {o_ttft * 1e3:>10.2f}ms "
                      f"{o_ttft / k_ttft:>6.2f}   {k_rate:>12.0f} {o_rate:>12.0f} "
                      f"{o_rate / k_rate:>6.2f}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
