"""Models' custom metrics (`pb_utils.MetricFamily` / `Metric`), kept by the parent.

Triton keeps them in its prometheus-cpp registry, one for the whole server: a family
is known by its name (registering the name again with the same kind gives the same
family, its first description kept; with another kind it is an error) and a metric
by its family and label set (every `Metric` object with the same labels is the same
time series). Here each proxy object a stub creates is a reference, keyed by (owner,
id): a series lives while a `Metric` refers to it, a family while a `MetricFamily`
does. A stub that goes away drops all its references, so the metrics of an unloaded
model go away with it. Everything runs on the parent's event loop: no locks.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Hashable, Iterable
from itertools import pairwise

from pbserve.errors import invalid_arg

COUNTER, GAUGE, HISTOGRAM = 0, 1, 2  # pb_utils.MetricFamily kinds (TRITONSERVER_MetricKind)
_TYPE_NAMES = {COUNTER: "counter", GAUGE: "gauge", HISTOGRAM: "histogram"}
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
FAMILY_GONE = ("Invalid metric operation as the corresponding 'MetricFamily' has been "
               "deleted.")

Labels = tuple[tuple[str, str], ...]


class _Series:
    """One time series: a counter or gauge value, or a histogram's buckets."""

    __slots__ = ("bounds", "count", "counts", "labels", "refs", "sum", "value")

    def __init__(self, labels: Labels, bounds: tuple[float, ...]) -> None:
        self.labels = labels
        self.value = 0.0
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, the last one is +Inf
        self.sum = 0.0
        self.count = 0
        self.refs = 0


class _Family:
    __slots__ = ("help", "kind", "name", "refs", "series")

    def __init__(self, name: str, help_text: str, kind: int) -> None:
        self.name = name
        self.help = help_text
        self.kind = kind
        self.series: dict[Labels, _Series] = {}
        self.refs = 0


class _FamilyRef:
    """A stub's `MetricFamily` object, and the ids of the metrics made through it."""

    __slots__ = ("family", "metric_ids")

    def __init__(self, family: _Family) -> None:
        self.family = family
        self.metric_ids: set[int] = set()


class CustomMetrics:
    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._reserved = frozenset(reserved)  # the server's own families
        self._families: dict[str, _Family] = {}
        self._family_refs: dict[tuple[Hashable, int], _FamilyRef] = {}
        self._metric_refs: dict[tuple[Hashable, int], tuple[_FamilyRef, _Series]] = {}

    # -- families ---------------------------------------------------------------------
    def family_new(self, owner: Hashable, family_id: int, name: str, description: str,
                   kind: int) -> None:
        if kind not in _TYPE_NAMES:
            raise invalid_arg(f"Unknown metric kind {kind}")
        if not _METRIC_NAME.match(name) or name.startswith("__"):
            raise invalid_arg("Invalid metric name")
        if name in self._reserved:
            raise invalid_arg("Family name already exists")
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = _Family(name, description, kind)
        elif family.kind != kind:
            raise invalid_arg("Family name already exists with different type")
        family.refs += 1
        self._family_refs[(owner, family_id)] = _FamilyRef(family)

    def family_delete(self, owner: Hashable, family_id: int) -> None:
        """The family object is gone: so are the metrics made through it (Triton)."""
        ref = self._family_refs.pop((owner, family_id), None)
        if ref is None:
            return
        for metric_id in list(ref.metric_ids):
            self.metric_delete(owner, metric_id)
        family = ref.family
        family.refs -= 1
        if family.refs == 0 and not family.series:
            del self._families[family.name]

    # -- metrics ----------------------------------------------------------------------
    def metric_new(self, owner: Hashable, metric_id: int, family_id: int,
                   labels: dict[str, str], buckets: list[float] | None) -> None:
        ref = self._family_refs.get((owner, family_id))
        if ref is None:
            raise invalid_arg(FAMILY_GONE)
        family = ref.family
        for label in labels:
            if not _LABEL_NAME.match(label) or label.startswith("__") or (
                    family.kind == HISTOGRAM and label == "le"):
                raise invalid_arg("Invalid label name")
        key = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        series = family.series.get(key)
        if series is None:
            bounds = tuple(float(b) for b in buckets or ()) if family.kind == HISTOGRAM else ()
            if any(a >= b for a, b in pairwise(bounds)):
                raise invalid_arg("Bucket Boundaries must be strictly sorted")
            series = family.series[key] = _Series(key, bounds)
        series.refs += 1
        ref.metric_ids.add(metric_id)
        self._metric_refs[(owner, metric_id)] = (ref, series)

    def metric_delete(self, owner: Hashable, metric_id: int) -> None:
        entry = self._metric_refs.pop((owner, metric_id), None)
        if entry is None:
            return
        ref, series = entry
        ref.metric_ids.discard(metric_id)
        series.refs -= 1
        if series.refs == 0:
            ref.family.series.pop(series.labels, None)

    def metric_op(self, owner: Hashable, metric_id: int, op: str, value: float) -> float:
        """increment / set / observe / value; returns the value of a counter or gauge."""
        entry = self._metric_refs.get((owner, metric_id))
        if entry is None:
            raise invalid_arg(FAMILY_GONE)
        kind, series = entry[0].family.kind, entry[1]
        value = float(value)
        if op == "increment" and (kind == GAUGE or (kind == COUNTER and value >= 0)):
            series.value += value
        elif op == "set" and kind == GAUGE:
            series.value = value
        elif op == "observe" and kind == HISTOGRAM:
            series.counts[bisect_left(series.bounds, value)] += 1
            series.sum += value
            series.count += 1
        elif op != "value" or kind == HISTOGRAM:
            raise invalid_arg(f"metric operation '{op}' is not supported by a "
                              f"{_TYPE_NAMES[kind]} metric")
        return series.value

    def owner_gone(self, owner: Hashable) -> None:
        """A stub ended: every family and metric object it had is gone."""
        for key in [k for k in self._metric_refs if k[0] == owner]:
            self.metric_delete(owner, key[1])
        for key in [k for k in self._family_refs if k[0] == owner]:
            self.family_delete(owner, key[1])

    # -- exposition -------------------------------------------------------------------
    def render(self) -> str:
        """Prometheus text, as prometheus-cpp writes it: families without a series are
        left out, histograms as _count, _sum, then cumulative _bucket lines."""
        lines: list[str] = []
        for family in self._families.values():
            if not family.series:
                continue
            name = family.name
            if family.help:
                lines.append(f"# HELP {name} {_escape_help(family.help)}")
            lines.append(f"# TYPE {name} {_TYPE_NAMES[family.kind]}")
            for series in family.series.values():
                if family.kind != HISTOGRAM:
                    lines.append(f"{name}{_labels(series.labels)} {_number(series.value)}")
                    continue
                lines.append(f"{name}_count{_labels(series.labels)} {series.count}")
                lines.append(f"{name}_sum{_labels(series.labels)} {_number(series.sum)}")
                cumulative = 0
                for bound, count in zip(series.bounds, series.counts):
                    cumulative += count
                    lines.append(f"{name}_bucket{_labels(series.labels, _number(bound))} "
                                 f"{cumulative}")
                if not series.bounds or series.bounds[-1] != math.inf:
                    lines.append(f"{name}_bucket{_labels(series.labels, '+Inf')} "
                                 f"{series.count}")
        return "\n".join(lines) + "\n" if lines else ""


def _number(value: float) -> str:
    """prometheus-cpp's WriteValue: %.16g, and Nan / +Inf / -Inf."""
    if math.isnan(value):
        return "Nan"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.16g}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(labels: Labels, le: str | None = None) -> str:
    pairs = [f'{k}="{_escape_label(v)}"' for k, v in labels]
    if le is not None:
        pairs.append(f'le="{le}"')
    return "{" + ",".join(pairs) + "}" if pairs else ""

