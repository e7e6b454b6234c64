"""Custom metrics: a request counter and a histogram of execute times.

OUTPUT0 is INPUT0 sorted. Both metrics appear on the metrics port (default 8002), after
Triton's own nv_inference_* families:

    custom_metrics_requests_total{model="custom_metrics",version="1"} 3
    custom_metrics_execute_ms_bucket{model="custom_metrics",version="1",le="0.1"} 2
    ...
"""

import time

import numpy as np

import triton_python_backend_utils as pb_utils

BUCKETS_MS = [0.1, 0.5, 1.0, 5.0, 10.0, 50.0]


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        # A family is created once per name; more instances of this model share it, and
        # Metrics with the same labels are the same time series.
        self.requests_family = pb_utils.MetricFamily(
            name="custom_metrics_requests_total",
            description="Requests executed by the custom_metrics example",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.latency_family = pb_utils.MetricFamily(
            name="custom_metrics_execute_ms",
            description="Time the custom_metrics example spent per request, in ms",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        self.requests = self.requests_family.Metric(labels=labels)
        self.latency = self.latency_family.Metric(labels=labels, buckets=BUCKETS_MS)

    def execute(self, requests):
        responses = []
        for request in requests:
            start = time.perf_counter()
            values = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", np.sort(values))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            self.requests.increment(1)
            self.latency.observe((time.perf_counter() - start) * 1000.0)
        return responses

    def finalize(self):
        # Metrics before their family (Triton's rule); the parent drops what is left
        # when the model is unloaded anyway.
        del self.requests, self.latency
        del self.requests_family, self.latency_family
