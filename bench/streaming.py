"""Many gRPC streams against ONE instance of an `async def execute` decoupled model.

Each of `--streams` concurrent ModelStreamInfer calls (tritonclient.grpc.aio, one
request each) asks bench/models/chunk_sleeper for `--chunks` responses, each after
`await asyncio.sleep(--delay-ms)`. With every coroutine overlapping on the stub's
event loop the whole round takes chunks * delay (the ideal); the ratio says how far
from it the server (and this Python client) are.

    python bench/streaming.py [--streams 200] [--chunks 10] [--delay-ms 50] [--rounds 3]
    python bench/streaming.py --url 127.0.0.1:8001   # a server you started yourself

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as grpcaio

from pbserve.testing import running_server

ROOT = Path(__file__).resolve().parents[1]

MODEL = "chunk_sleeper"


def inputs(chunks: int, delay_ms: int) -> list[grpcaio.InferInput]:
    c = grpcaio.InferInput("CHUNKS", [1], "INT32")
    c.set_data_from_numpy(np.array([chunks], np.int32))
    d = grpcaio.InferInput("DELAY_MS", [1], "INT32")
    d.set_data_from_numpy(np.array([delay_ms], np.int32))
    return [c, d]


async def one_stream(client: grpcaio.InferenceServerClient, chunks: int,
                     delay_ms: int) -> int:
    async def requests():
        yield {"model_name": MODEL, "inputs": inputs(chunks, delay_ms)}

    count = 0
    async for _result, error in client.stream_infer(requests()):
        if error is not None:
            raise error
        count += 1
    return count


async def round_(url: str, streams: int, chunks: int, delay_ms: int) -> tuple[float, int]:
    client = grpcaio.InferenceServerClient(url)
    try:
        start = time.perf_counter()
        counts = await asyncio.gather(*(one_stream(client, chunks, delay_ms)
                                        for _ in range(streams)))
        return time.perf_counter() - start, sum(counts)
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--delay-ms", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", help="gRPC address of a running pbserve serving "
                        "bench/models (default: start one)")
    args = parser.parse_args()
    ideal = args.chunks * args.delay_ms / 1000
    server = contextlib.nullcontext() if args.url else running_server(ROOT / "bench" / "models")
    with server as srv:
        url = args.url or srv.grpc_url
        asyncio.run(round_(url, 4, 1, 1))  # warm up: channel, stub loop
        print(f"{args.streams} streams x {args.chunks} chunks, {args.delay_ms} ms per chunk, "
              f"one instance; ideal {ideal:.3f} s")
        for r in range(args.rounds):
            total, responses = asyncio.run(round_(url, args.streams, args.chunks,
                                                  args.delay_ms))
            print(f"round {r + 1}: {total:.3f} s  ratio {total / ideal:.2f}x ideal  "
                  f"{responses} responses  {responses / total:,.0f} responses/s")


if __name__ == "__main__":
    main()
