"""Custom metrics: `MetricFamily` (name, help, kind) and its labelled `Metric`s.

Both are proxies: the server owns the real metric. Kind rules (what each kind
allows, buckets) are checked here so misuse fails fast with a clear message; the
runtime reports everything else (e.g. a name reused with another kind).
Dropping a family first clears its metrics, as in Triton, so a metric used after
its family is gone raises.
"""

from __future__ import annotations

import enum
import itertools
import math
import sys
import threading
import weakref
from typing import Any

from ._runtime import get_runtime, require_runtime
from ._strings import as_str
from .error import TritonModelException

_ids = itertools.count(1)


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


_FAMILY_GONE = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. "
    "The 'MetricFamily' object should be deleted AFTER its corresponding 'Metric' "
    "objects have been deleted."
)


class Metric:
    """One labelled time series of a family; create it with `family.Metric(...)`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Metric objects are created with MetricFamily.Metric(labels, buckets)")

    @classmethod
    def _create(
        cls,
        family: MetricFamily,
        labels: dict[str, str],
        buckets: list[float] | None,
    ) -> Metric:
        metric = cls.__new__(cls)
        metric._id = next(_ids)
        metric._family_id = family._id
        metric._kind = family._kind
        metric._labels = labels
        metric._buckets = buckets
        metric._cleared = False
        metric._registered = False
        return metric

    # Read by the runtime.
    @property
    def id(self) -> int:
        return self._id

    @property
    def family_id(self) -> int:
        return self._family_id

    @property
    def kind(self) -> MetricKind:
        return self._kind

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._labels)

    @property
    def buckets(self) -> list[float] | None:
        return None if self._buckets is None else list(self._buckets)

    def _op(self, op: str, value: float, failure: str) -> float:
        if self._cleared:
            raise TritonModelException(f"{failure}: {_FAMILY_GONE}")
        runtime = require_runtime(f"Metric.{op}")
        try:
            return runtime.metric_op(self, op, value)
        except TritonModelException as exc:
            raise TritonModelException(f"{failure}: {exc}") from None

    def _check_value(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"metric value must be a number, got {type(value).__name__}")
        return float(value)

    def increment(self, value: float) -> None:
        """Add `value`: counters (value >= 0) and gauges (any sign)."""
        failure = "Failed to increment metric value"
        value = self._check_value(value)
        if self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException(f"{failure}: histogram metrics cannot be incremented")
        if self._kind == MetricKind.COUNTER and value < 0:
            raise TritonModelException(
                f"{failure}: counter metrics cannot be incremented by a negative value"
            )
        self._op("increment", value, failure)

    def set(self, value: float) -> None:
        """Set a gauge to `value`."""
        failure = "Failed to set metric value"
        value = self._check_value(value)
        if self._kind != MetricKind.GAUGE:
            raise TritonModelException(f"{failure}: only gauge metrics can be set")
        self._op("set", value, failure)

    def observe(self, value: float) -> None:
        """Record one observation in a histogram."""
        failure = "Failed to observe metric value"
        value = self._check_value(value)
        if self._kind != MetricKind.HISTOGRAM:
            raise TritonModelException(f"{failure}: only histogram metrics can observe values")
        self._op("observe", value, failure)

    def value(self) -> float:
        """Current value of a counter or gauge."""
        failure = "Failed to get metric value"
        if self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException(f"{failure}: histogram metrics have no single value")
        return float(self._op("value", 0.0, failure))

    def __del__(self) -> None:
        if getattr(self, "_registered", False) and not self._cleared:
            runtime = get_runtime()
            if runtime is not None:
                try:
                    runtime.metric_delete(self)
                except Exception as exc:  # a finaliser must not raise
                    print(f"Error when deleting Metric: {exc}", file=sys.stderr)

    def __repr__(self) -> str:
        return f"Metric({self._kind.name}, labels={self._labels})"


class MetricFamily:
    """`MetricFamily(name, description, kind)` with kind COUNTER, GAUGE or HISTOGRAM."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: int) -> None:
        self._registered = False
        name = as_str("MetricFamily name", name)
        description = as_str("MetricFamily description", description)
        if isinstance(kind, bool) or not isinstance(kind, int) or kind not in (0, 1, 2):
            raise TypeError(
                "MetricFamily kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM, "
                f"got {kind!r}"
            )
        self._id = next(_ids)
        self._name = name
        self._description = description
        self._kind = MetricKind(kind)
        self._metrics: weakref.WeakSet[Metric] = weakref.WeakSet()
        self._lock = threading.Lock()
        runtime = require_runtime("MetricFamily")
        try:
            runtime.metric_family_new(self)
        except TritonModelException as exc:
            raise TritonModelException(f"Error when creating MetricFamily: {exc}") from None
        self._registered = True

    # Read by the runtime.
    @property
    def id(self) -> int:
        return self._id

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def kind(self) -> MetricKind:
        return self._kind

    def Metric(  # noqa: N802 - Triton's method name
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> Metric:
        """A metric of this family with `labels`; histograms need `buckets`."""
        if labels is None:
            labels = {}
        elif not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        for key, value in labels.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError("metric labels must map str to str")
        bucket_list: list[float] | None = None
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            bucket_list = []
            for bound in buckets:
                if isinstance(bound, bool) or not isinstance(bound, (int, float)):
                    raise TypeError("histogram buckets must be numbers")
                if math.isnan(bound):
                    raise TritonModelException("Failed to create metric. Buckets must not be NaN.")
                bucket_list.append(float(bound))
            if any(a >= b for a, b in zip(bucket_list, bucket_list[1:])):
                raise TritonModelException(
                    "Failed to create metric. Buckets must be in strictly increasing order."
                )
        elif self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")

        metric = Metric._create(self, dict(labels), bucket_list)
        runtime = require_runtime("MetricFamily.Metric")
        try:
            runtime.metric_new(metric)
        except TritonModelException as exc:
            raise TritonModelException(f"Error when creating Metric: {exc}") from None
        metric._registered = True
        with self._lock:
            self._metrics.add(metric)
        return metric

    def __del__(self) -> None:
        if not getattr(self, "_registered", False):
            return
        with self._lock:
            metrics = list(self._metrics)
        for metric in metrics:
            metric._cleared = True
        runtime = get_runtime()
        if runtime is not None:
            try:
                runtime.metric_family_delete(self)
            except Exception as exc:  # a finaliser must not raise
                print(f"Error when deleting MetricFamily: {exc}", file=sys.stderr)

    def __repr__(self) -> str:
        return f"MetricFamily({self._name!r}, {self._kind.name})"
