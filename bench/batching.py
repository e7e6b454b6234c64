"""Throughput of a model whose execute() costs a fixed time per call (not per request),
with and without dynamic batching, at `--clients` concurrent clients.

Copies of one model are served: `fixed_cost_plain` (Triton's default scheduler: one
request per execute), `fixed_cost_batched` (`dynamic_batching`, max_batch_size 16, a
50 ms `max_queue_delay_microseconds`: a batch waits for the clients whose answers just
went out) and `fixed_cost_nodelay` (no queue delay: whatever is queued goes at once, so
the clients split into groups that alternate). Each of `--clients` threads sends HTTP
requests back to back for `--seconds`; requests per second are counted per model and
the ratios to `fixed_cost_plain` printed. The ideal ratio is min(clients, 16).

    python bench/batching.py [--clients 16] [--seconds 3] [--cost-ms 20]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from pbserve.testing import running_server

MAX_BATCH = 16
MODELS = {
    "fixed_cost_plain": "",
    "fixed_cost_batched": "dynamic_batching { max_queue_delay_microseconds: 50000 }",
    "fixed_cost_nodelay": "dynamic_batching { }",
}
MODEL = '''
import time

import triton_python_backend_utils as pb_utils

COST_S = {cost_s}


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(COST_S)  # per call, whatever the batch
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
'''
CONFIG = '''
name: "{name}"
backend: "python"
max_batch_size: {max_batch}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{scheduling}
'''


def write_models(repo: Path, cost_s: float) -> None:
    for name, scheduling in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(MODEL.format(cost_s=cost_s))
        (repo / name / "config.pbtxt").write_text(CONFIG.format(
            name=name, max_batch=MAX_BATCH, scheduling=scheduling))


def measure(url: str, model: str, clients: int, seconds: float) -> float:
    """Requests per second over `seconds`, `clients` threads each sending back to back."""
    counts = [0] * clients
    errors: list[BaseException] = []
    start_line = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client(index: int) -> None:
        http = httpclient.InferenceServerClient(url, network_timeout=60)
        tensor = httpclient.InferInput("IN", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.full((1, 4), index, np.float32))
        start_line.wait()
        try:
            while time.perf_counter() < stop_at[0]:
                http.infer(model, [tensor])
                counts[index] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
        finally:
            http.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    begin = time.perf_counter()
    start_line.wait()
    for t in threads:
        t.join(seconds + 60)
    elapsed = time.perf_counter() - begin
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--cost-ms", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pbserve-bench-") as tmp:
        repo = Path(tmp) / "models"
        write_models(repo, args.cost_ms / 1000)
        with running_server(repo) as server:
            for model in MODELS:  # warm up
                measure(server.http_url, model, 2, 0.2)
            rates = {model: measure(server.http_url, model, args.clients, args.seconds)
                     for model in MODELS}
    plain = rates["fixed_cost_plain"]
    print(f"execute() cost {args.cost_ms:.0f} ms per call, {args.clients} clients, "
          f"{args.seconds:.0f} s each; ideal ratio {min(args.clients, MAX_BATCH)}x")
    print(f"  without dynamic batching:            {plain:7.1f} requests/s "
          f"(one per call: at most {1000 / args.cost_ms:.0f})")
    print(f"  dynamic batching, 50 ms queue delay: {rates['fixed_cost_batched']:7.1f} "
          f"requests/s, ratio {rates['fixed_cost_batched'] / plain:.1f}x")
    print(f"  dynamic batching, no queue delay:    {rates['fixed_cost_nodelay']:7.1f} "
          f"requests/s, ratio {rates['fixed_cost_nodelay'] / plain:.1f}x")


if __name__ == "__main__":
    main()
