"""The gRPC ModelInfer codec in the parent, before and after server/grpc/wire.py, per request.

    flock -x /tmp/pbserve-cpu.lock python bench/grpc_codec.py

"old": protobuf parses the whole body and serializes the whole response; "new": the bytes
path of grpc_wire.py. Each includes a copy of the input standing for the pool block;
"copy" is that copy alone, for scale. Best of 5, microseconds.
"""

from __future__ import annotations

import time

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from pbserve.backend.types import InferResponse, TensorData
from pbserve.server.grpc.codec import (
    decode_infer_request,
    encode_infer_response,
    encode_infer_response_bytes,
)
from pbserve.server.grpc.wire import parse_infer_request


def body_of(elements: int) -> bytes:
    request = pb.ModelInferRequest(model_name="identity_fp32")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[elements])
    request.outputs.add(name="OUTPUT0")
    request.raw_input_contents.append(np.ones(elements, np.float32).tobytes())
    return request.SerializeToString()


def _response(data: memoryview) -> InferResponse:
    return InferResponse("identity_fp32", "1", "",
                         [TensorData("OUTPUT0", "FP32", (len(data) // 4,), data)])


def old(body: bytes) -> bytes:
    request, _ = decode_infer_request(pb.ModelInferRequest.FromString(body), "")
    data = memoryview(bytearray(request.inputs[0].data))  # the pool block
    return encode_infer_response(_response(data)).SerializeToString()


def new(body: bytes) -> bytes:
    message, raw = parse_infer_request(body)
    request, _ = decode_infer_request(message, "", raw)
    data = memoryview(bytearray(request.inputs[0].data))
    return encode_infer_response_bytes(_response(data))


def copy(body: bytes) -> memoryview:
    return memoryview(bytearray(body))


def main() -> None:
    for elements, reps in ((16, 20000), (4194304, 20)):
        body = body_of(elements)
        assert (pb.ModelInferResponse.FromString(old(body))
                == pb.ModelInferResponse.FromString(new(body)))
        for fn in (old, new, copy):
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(reps):
                    fn(body)
                best = min(best, (time.perf_counter() - t0) / reps * 1e6)
            print(f"{len(body):>9} B {fn.__name__:5} {best:10.1f} us")


if __name__ == "__main__":
    main()
