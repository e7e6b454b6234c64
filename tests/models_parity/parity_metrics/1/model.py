"""Custom metrics: a counter (two Metric objects on one series), a gauge, a histogram."""

import gc

import numpy as np

import triton_python_backend_utils as pb_utils

LABELS = {"model": "parity_metrics", "version": "1"}


class TritonPythonModel:
    def initialize(self, args):
        MetricFamily = pb_utils.MetricFamily
        self.requests = MetricFamily("parity_requests_total", "Requests seen",
                                     MetricFamily.COUNTER)
        self.depth = MetricFamily("parity_queue_depth", "Last VALUE", MetricFamily.GAUGE)
        self.latency = MetricFamily("parity_latency_ms", "VALUE as a latency",
                                    MetricFamily.HISTOGRAM)
        self.counter = self.requests.Metric(labels=LABELS)
        self.alias = self.requests.Metric(labels=dict(LABELS))  # the same series
        self.gauge = self.depth.Metric(labels=LABELS)
        self.histogram = self.latency.Metric(labels=LABELS, buckets=[1.0, 10.0, 100.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = float(pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()[0])
            self.counter.increment(1)
            self.alias.increment(1)
            self.gauge.set(value)
            self.histogram.observe(value)
            temporary = self.requests.Metric(labels={"model": "parity_metrics",
                                                     "version": "temporary"})
            temporary.increment(5)
            temporary.cycle = temporary  # only the garbage collector can finalise it
            del temporary
            gc.collect()  # its series goes with it
            try:
                pb_utils.MetricFamily("parity_requests_total", "", pb_utils.MetricFamily.GAUGE)
                misuse = "no error"
            except pb_utils.TritonModelException as exc:
                misuse = str(exc)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("COUNT", np.array([self.counter.value()])),
                pb_utils.Tensor("MISUSE", np.array([misuse.encode()], dtype=np.object_)),
            ]))
        return responses
