"""MetricFamily / Metric: kinds, labels, buckets, operations and lifetime."""

import gc

import pytest

import backend_utils as pb
from backend_utils.testing import FakeRuntime, installed


@pytest.fixture
def runtime():
    with installed(FakeRuntime()) as rt:
        yield rt


def test_family_registers_with_the_runtime(runtime):
    family = pb.MetricFamily("requests_total", "Requests seen", pb.MetricFamily.COUNTER)
    assert runtime.families[family.id] == ("requests_total", "Requests seen", 0)
    assert (pb.MetricFamily.COUNTER, pb.MetricFamily.GAUGE, pb.MetricFamily.HISTOGRAM) == (0, 1, 2)
    assert pb.MetricKind.GAUGE is pb.MetricFamily.GAUGE


def test_counter_increments_and_reads(runtime):
    family = pb.MetricFamily("c", "", pb.MetricFamily.COUNTER)
    counter = family.Metric(labels={"model": "m"})
    counter.increment(2)
    counter.increment(0.5)
    assert counter.value() == 2.5
    assert runtime.metrics[counter.id]["labels"] == {"model": "m"}
    with pytest.raises(pb.TritonModelException, match="Failed to increment metric value"):
        counter.increment(-1)
    with pytest.raises(pb.TritonModelException, match="Failed to set metric value"):
        counter.set(3)
    with pytest.raises(pb.TritonModelException, match="Failed to observe metric value"):
        counter.observe(3)


def test_gauge_sets_and_moves_both_ways(runtime):
    family = pb.MetricFamily("g", "", pb.MetricFamily.GAUGE)
    gauge = family.Metric()
    gauge.set(10)
    gauge.increment(-4)
    assert gauge.value() == 6
    with pytest.raises(pb.TritonModelException):
        gauge.observe(1)


def test_histogram_observes_with_buckets(runtime):
    family = pb.MetricFamily("h", "", pb.MetricFamily.HISTOGRAM)
    histogram = family.Metric(buckets=[0.1, 1, 10])
    histogram.observe(0.5)
    assert runtime.metrics[histogram.id]["observed"] == [0.5]
    assert histogram.buckets == [0.1, 1.0, 10.0]
    assert family.Metric(buckets=[]).buckets == []
    for misuse in (lambda: histogram.increment(1), lambda: histogram.set(1), histogram.value):
        with pytest.raises(pb.TritonModelException):
            misuse()


@pytest.mark.parametrize(
    ("kind", "kwargs", "message"),
    [
        (pb.MetricFamily.HISTOGRAM, {}, "Missing required buckets."),
        (pb.MetricFamily.COUNTER, {"buckets": [1.0]}, "Unexpected buckets found."),
        (pb.MetricFamily.GAUGE, {"buckets": []}, "Unexpected buckets found."),
        (pb.MetricFamily.HISTOGRAM, {"buckets": (1, 2)}, "Buckets must be a list."),
        (pb.MetricFamily.HISTOGRAM, {"buckets": [2, 1]}, "strictly increasing"),
        (pb.MetricFamily.HISTOGRAM, {"buckets": [1, 1]}, "strictly increasing"),
        (pb.MetricFamily.COUNTER, {"labels": ["a"]}, "Labels must be a dictionary."),
    ],
)
def test_metric_creation_rules(runtime, kind, kwargs, message):
    family = pb.MetricFamily("f", "", kind)
    with pytest.raises(pb.TritonModelException, match=message):
        family.Metric(**kwargs)


def test_bad_types_are_type_errors(runtime):
    with pytest.raises(TypeError):
        pb.MetricFamily(None, "", pb.MetricFamily.COUNTER)
    with pytest.raises(TypeError):
        pb.MetricFamily("x", "", 7)
    family = pb.MetricFamily("x", "", pb.MetricFamily.GAUGE)
    with pytest.raises(TypeError):
        family.Metric(labels={"a": 1})
    metric = family.Metric()
    with pytest.raises(TypeError):
        metric.set("3")
    with pytest.raises(TypeError):
        pb.Metric()


def test_runtime_errors_are_wrapped(runtime):
    kept = pb.MetricFamily("same", "", pb.MetricFamily.COUNTER)  # noqa: F841
    with pytest.raises(pb.TritonModelException, match="Error when creating MetricFamily: .*different kind"):
        pb.MetricFamily("same", "", pb.MetricFamily.GAUGE)
    family = pb.MetricFamily("g2", "", pb.MetricFamily.GAUGE)
    gauge = family.Metric()
    runtime.metric_error = "server said no"
    with pytest.raises(pb.TritonModelException, match="Failed to set metric value: server said no"):
        gauge.set(1)
    with pytest.raises(pb.TritonModelException, match="Error when creating Metric: server said no"):
        family.Metric()
    with pytest.raises(pb.TritonModelException, match="Error when creating MetricFamily: server said no"):
        pb.MetricFamily("other", "", pb.MetricFamily.GAUGE)
    runtime.metric_error = None


def test_a_temporary_family_takes_its_metrics_with_it(runtime):
    """As in Triton, a Metric does not keep its MetricFamily alive."""
    metric = pb.MetricFamily("tmp", "", pb.MetricFamily.GAUGE).Metric()
    gc.collect()
    with pytest.raises(pb.TritonModelException, match="has been deleted"):
        metric.set(1)


def test_deleting_a_family_clears_its_metrics(runtime):
    family = pb.MetricFamily("d", "", pb.MetricFamily.GAUGE)
    family_id = family.id
    metric = family.Metric()
    del family
    gc.collect()
    assert family_id in runtime.deleted_families
    with pytest.raises(pb.TritonModelException, match="'MetricFamily' has been deleted"):
        metric.set(1)
    metric_id = metric.id
    del metric
    gc.collect()
    assert metric_id not in runtime.deleted_metrics  # went with its family


def test_deleting_a_metric_tells_the_runtime(runtime):
    family = pb.MetricFamily("e", "", pb.MetricFamily.COUNTER)
    metric = family.Metric()
    metric_id = metric.id
    del metric
    gc.collect()
    assert runtime.deleted_metrics == [metric_id]


def test_metrics_need_a_running_model():
    with pytest.raises(pb.TritonModelException, match="needs a running model"):
        pb.MetricFamily("x", "", pb.MetricFamily.COUNTER)
