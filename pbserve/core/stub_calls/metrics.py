"""Custom metrics calls: the families and metrics a model makes with pb_utils.MetricFamily
and Metric, kept in one `CustomMetrics` (observability/custom_metrics.py) under the
instance that made them, and rendered with Triton's on the metrics port. Creating one and
each operation on it are calls answered with a value; deleting one (the proxy objects'
finalizers) is a NOTIFY, which wants no answer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from pbserve.core.observability import metrics
from pbserve.core.observability.custom_metrics import CustomMetrics


class MetricCalls:
    def __init__(self) -> None:
        # Triton's own families' names are taken
        self.metrics = CustomMetrics(reserved=(f[1] for f in metrics._FAMILIES))

    def answers(self) -> dict[str, Callable[..., object]]:
        """op -> what answers it, called with (caller, *args)."""
        m = self.metrics
        return {"metric_family_new": m.family_new, "metric_new": m.metric_new,
                "metric_op": m.metric_op}

    def notices(self) -> dict[str, Callable[..., None]]:
        """NOTIFY op -> what takes it, called with (caller, *args)."""
        m = self.metrics
        return {"metric_family_delete": m.family_delete, "metric_delete": m.metric_delete}

    def caller_gone(self, caller: Hashable) -> None:
        """A stub ended: the metrics its model made go."""
        self.metrics.owner_gone(caller)
