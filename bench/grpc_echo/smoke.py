"""Does an echo answer tritonclient? `python bench/grpc_echo/smoke.py PORT`."""

from __future__ import annotations

import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient


def main() -> None:
    port = int(sys.argv[1])
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("identity_fp32")
    c.get_server_metadata()
    c.get_model_metadata("identity_fp32")
    c.get_model_config("identity_fp32")
    c.get_inference_statistics("identity_fp32")
    for n in (16, 4194304):
        a = np.arange(n, dtype=np.float32)
        i = grpcclient.InferInput("INPUT0", [n], "FP32")
        i.set_data_from_numpy(a)
        r = c.infer("identity_fp32", [i])
        assert np.array_equal(r.as_numpy("OUTPUT0"), a), n
    results: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: results.put(error or result))
    for k in range(3):
        i = grpcclient.InferInput("INPUT0", [4], "FP32")
        i.set_data_from_numpy(np.full(4, k, np.float32))
        c.async_stream_infer("identity_fp32", [i])
    got = [results.get(timeout=10) for _ in range(3)]
    c.stop_stream()
    assert [int(r.as_numpy("OUTPUT0")[0]) for r in got] == [0, 1, 2], got
    print("ok")


if __name__ == "__main__":
    main()
