"""Several workers behind one frontend: throughput, the plane's per-request cost, and a
64 MiB tensor through the data plane.

A real nats-server, a model-less frontend and pbserve workers (each a process with its
own stubs), all on this machine:

1. the per-request cost of the plane at 64 B: `identity` called on a worker's own
   HTTP/gRPC (local) against the same call through the frontend (NATS there and back);
2. a 64 MiB tensor: `identity` called locally against through the frontend (the input
   pulled by the worker from the frontend's data plane, the output by the frontend from
   the worker's), and a bare data-plane pull of 64 MiB over loopback;
3. a 64 MiB tensor A -> B through the data plane against a local BLS call:
   `bls_forward` hands its input to `identity` and the answer back; called on a worker
   that has `identity` too (local BLS) and on a worker that has only `bls_forward` (its
   call crosses to another worker, the tensor pulled point to point both ways);
4. throughput of `spin` (a CPU-bound model: a pure-Python loop, one instance a worker)
   through the frontend with 1, 2 and 4 workers, `--clients` HTTP clients.

    flock -x /tmp/pbserve-cpu.lock python bench/scaleout.py [--seconds 4] [--clients 8]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pbserve.testing import RunningServer, running_nats

ROOT = Path(__file__).resolve().parent.parent
SPIN = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            total = 0
            for i in range({loops}):  # CPU-bound: holds its core
                total += i * i
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUT", np.array([total], np.int64))]))
        return responses
'''
SPIN_CONFIG = '''
name: "spin"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''


def _repository(tmp: Path, loops: int) -> Path:
    repo = tmp / "repo"
    (repo / "spin/1").mkdir(parents=True)
    (repo / "spin/1/model.py").write_text(SPIN.format(loops=loops))
    (repo / "spin/config.pbtxt").write_text(SPIN_CONFIG)
    shutil.copytree(ROOT / "models/examples/identity", repo / "identity")
    shutil.copytree(ROOT / "tests/models/bls_forward", repo / "bls_forward")
    return repo


def _callers(tmp: Path) -> Path:
    """A repository with only bls_forward: its BLS calls of identity cross the plane."""
    repo = tmp / "callers"
    shutil.copytree(ROOT / "tests/models/bls_forward", repo / "bls_forward")
    return repo


def _wait(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(str(condition))
        time.sleep(0.05)


def _throughput(url: str, clients: int, seconds: float) -> float:
    """Requests per second of `spin` through `url`, `clients` threads back to back."""
    counts = [0] * clients
    stop = time.monotonic() + seconds

    def client(index: int) -> None:
        c = httpclient.InferenceServerClient(url)
        tensor = httpclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([index], np.int32))
        while time.monotonic() < stop:
            c.infer("spin", [tensor])
            counts[index] += 1
        c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - start)


def _latency_us(call, count: int) -> tuple[float, float]:
    """Median and 90th percentile of `count` calls, in microseconds (after a warm-up)."""
    for _ in range(min(20, count)):
        call()
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e6)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9)]


def _identity_call(module, url: str, data: np.ndarray, datatype: str,
                   model: str = "identity"):
    name = f"INPUT_{datatype}"
    if module is httpclient:
        client = httpclient.InferenceServerClient(url, network_timeout=300)
        tensor = httpclient.InferInput(name, list(data.shape), datatype)
        tensor.set_data_from_numpy(data, binary_data=True)
        outputs = [httpclient.InferRequestedOutput(f"OUTPUT_{datatype}", binary_data=True)]
    else:
        client = grpcclient.InferenceServerClient(url)
        tensor = grpcclient.InferInput(name, list(data.shape), datatype)
        tensor.set_data_from_numpy(data)
        outputs = [grpcclient.InferRequestedOutput(f"OUTPUT_{datatype}")]

    def call() -> None:
        result = client.infer(model, [tensor], outputs=outputs)
        assert result.as_numpy(f"OUTPUT_{datatype}").nbytes == data.nbytes

    return call


async def _bare_pull_ms(nbytes: int, count: int) -> float:
    """A data-plane hold and pull of `nbytes` over loopback, in-process: median ms."""
    from pbserve.distributed.data_plane import DataPlane

    holder = DataPlane("127.0.0.1", 0, 0, 0, ttl_s=60)
    await holder.start()
    payload = secrets.token_bytes(nbytes)
    times = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            await holder.pull(holder.group().hold(payload))
            times.append((time.perf_counter() - start) * 1e3)
    finally:
        await holder.stop()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--loops", type=int, default=200_000,
                        help="spin's loop count a request (about 10 ms of one core)")
    args = parser.parse_args()
    # Stopped (a timeout's SIGTERM): the servers and nats-server are still stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    print(f"pbserve scale-out bench, {time.strftime('%Y-%m-%d %H:%M:%S')}; this machine "
          f"has {os.cpu_count()} CPU cores: the frontend, every worker, their stubs, "
          f"nats-server and the clients all share them")
    with tempfile.TemporaryDirectory() as tmp_name, \
            running_nats(Path(tmp_name) / "nats.log") as nats:
        tmp = Path(tmp_name)
        repo = _repository(tmp, args.loops)
        plane = ["--request-plane", nats.url]
        frontend = RunningServer([], plane, tmp / "frontend.log")
        workers: list[RunningServer] = []
        try:
            frontend.wait_ready()

            def add_workers(count: int) -> None:
                new = [RunningServer([repo], [*plane, "--worker-name", f"w{len(workers) + i}"],
                                     tmp / f"w{len(workers) + i}.log") for i in range(count)]
                for w in new:
                    w.wait_ready(timeout=120)
                workers.extend(new)
                # The frontend has seen them, and each has taken requests.
                client = frontend.http_client()
                _wait(lambda: client.is_model_ready("spin"))
                _throughput(frontend.http_url, len(workers) * 2, 1.0)  # warm-up

            add_workers(1)
            print("\n1. per-request cost of the plane, 64 B (identity, 16 FP32), c=1, "
                  "median / p90 latency in us:")
            small = np.arange(16, dtype=np.float32)
            worker = workers[0]
            for label, module, local, remote in (
                    ("HTTP", httpclient, worker.http_url, frontend.http_url),
                    ("gRPC", grpcclient, worker.grpc_url, frontend.grpc_url)):
                lm, lp = _latency_us(_identity_call(module, local, small, "FP32"), 300)
                fm, fp = _latency_us(_identity_call(module, remote, small, "FP32"), 300)
                print(f"  {label}: local (worker's own) {lm:7.0f} / {lp:7.0f}   through the "
                      f"frontend {fm:7.0f} / {fp:7.0f}   plane adds {fm - lm:6.0f} us")

            print("\n2. 64 MiB (identity, UINT8), there and back, median of 5, ms:")
            big = np.frombuffer(secrets.token_bytes(64 << 20), np.uint8)
            for label, module, local, remote in (
                    ("HTTP", httpclient, worker.http_url, frontend.http_url),
                    ("gRPC", grpcclient, worker.grpc_url, frontend.grpc_url)):
                lm, _ = _latency_us(_identity_call(module, local, big, "UINT8"), 5)
                fm, _ = _latency_us(_identity_call(module, remote, big, "UINT8"), 5)
                print(f"  {label}: local (worker's own) {lm / 1e3:7.1f}   through the "
                      f"frontend (data plane both ways) {fm / 1e3:7.1f}")
            bare = asyncio.run(_bare_pull_ms(64 << 20, 5))
            print(f"  one bare data-plane pull of 64 MiB over loopback: {bare:.1f} ms "
                  f"({64 / 1024 / (bare / 1e3):.2f} GiB/s)")

            print("\n3. 64 MiB (FP32) through BLS: bls_forward hands it to identity and "
                  "back, called on the worker's own HTTP, median of 5, ms:")
            caller = RunningServer([_callers(tmp)], [*plane, "--worker-name", "caller"],
                                   tmp / "caller.log")
            try:
                caller.wait_ready(timeout=120)
                _wait(lambda: caller.http_client().is_model_ready("bls_forward"))
                floats = np.frombuffer(big, np.float32)
                lm, _ = _latency_us(_identity_call(httpclient, worker.http_url, floats,
                                                   "FP32", "bls_forward"), 5)
                rm, _ = _latency_us(_identity_call(httpclient, caller.http_url, floats,
                                                   "FP32", "bls_forward"), 5)
            finally:
                caller.stop()
            print(f"  identity on the same worker (local BLS) {lm / 1e3:7.1f}   on another "
                  f"worker (A -> B by the data plane, and back) {rm / 1e3:7.1f}")

            print(f"\n4. throughput of spin (CPU-bound, ~{args.loops // 20_000} ms of one "
                  f"core a request) through the frontend, {args.clients} HTTP clients, "
                  f"{args.seconds:g} s:")
            base = None
            for count in (1, 2, 4):
                if len(workers) < count:
                    add_workers(count - len(workers))
                rate = _throughput(frontend.http_url, args.clients, args.seconds)
                base = base or rate
                print(f"  {count} worker(s): {rate:7.1f} req/s  ({rate / base:.2f}x)")
        finally:
            frontend.stop()
            for w in workers:
                w.stop()


if __name__ == "__main__":
    main()
