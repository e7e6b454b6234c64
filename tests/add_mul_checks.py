"""Checks of an add-mul model (SUM = A + B, PROD = A * B over [batch, 4] FP32), which the
built-in backends' tests each build with their framework (ONNX, OpenVINO)."""

from __future__ import annotations

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from client_inputs import typed_input
from concurrent_calls import at_once


def check_add_mul(client: httpclient.InferenceServerClient, model: str) -> None:
    """Both outputs right over HTTP, and only the output asked for when one is."""
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 2, np.float32)
    inputs = [typed_input("A", a, "FP32"), typed_input("B", b, "FP32")]
    r = client.infer(model, inputs)
    np.testing.assert_array_equal(r.as_numpy("SUM"), a + b)
    np.testing.assert_array_equal(r.as_numpy("PROD"), a * b)
    r = client.infer(model, inputs, outputs=[httpclient.InferRequestedOutput("PROD")])
    assert r.as_numpy("SUM") is None
    np.testing.assert_array_equal(r.as_numpy("PROD"), a * b)


def check_batched(server, model: str) -> None:
    """Requests of 1, 2 and 3 rows sent at once over gRPC to a model with dynamic
    batching (and no request before): each answer right, and at least two of them ran
    as one batch."""
    def one(k: int) -> tuple:
        a = np.full((k, 4), k, np.float32)
        b = np.arange(4 * k, dtype=np.float32).reshape(k, 4)
        r = server.grpc_client().infer(model, [typed_input("A", a, "FP32", grpcclient),
                                               typed_input("B", b, "FP32", grpcclient)])
        return r.as_numpy("SUM"), a + b, r.as_numpy("PROD"), a * b

    results = at_once(one, (1, 2, 3))
    for got_sum, want_sum, got_prod, want_prod in results.values():
        np.testing.assert_array_equal(got_sum, want_sum)
        np.testing.assert_array_equal(got_prod, want_prod)
    stats = server.http_client().get_inference_statistics(model)["model_stats"][0]
    assert stats["inference_count"] == 6  # batch sizes 1 + 2 + 3
    assert stats["execution_count"] < 3, stats  # at least two requests ran as one batch
