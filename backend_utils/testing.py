"""A recording `Runtime` for unit tests of this package and of models.

`with installed(FakeRuntime()) as rt:` runs model code as if inside a stub, with
every server call recorded on `rt` and answered from plain attributes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ._runtime import get_runtime, set_runtime
from .error import TritonModelException
from .metrics import Metric, MetricFamily
from .request import InferenceRequest
from .response import InferenceResponse
from .response_iterator import ResponseIterator


BlsHandler = Callable[[InferenceRequest, bool], "InferenceResponse | ResponseIterator"]


class FakeRuntime:
    """Answers every `Runtime` call locally and records it."""

    def __init__(self, decoupled: bool = False) -> None:
        self.decoupled = decoupled
        self.logs: list[tuple[int, str, str, int]] = []
        self.sent: list[tuple[InferenceRequest, InferenceResponse | None, int]] = []
        self.send_error: str | None = None
        self.cancelled: set[Any] = set()
        self.cancel_queries = 0
        self.bls: BlsHandler | None = None
        self.bls_calls: list[tuple[InferenceRequest, bool]] = []
        self.families: dict[int, tuple[str, str, int]] = {}
        self.metrics: dict[int, dict[str, Any]] = {}
        self.deleted_families: list[int] = []
        self.deleted_metrics: list[int] = []
        self.metric_error: str | None = None
        self.loaded: dict[str, tuple[str, dict[str, bytes] | None]] = {}
        self.unloaded: list[tuple[str, bool]] = []
        self.ready: set[tuple[str, str]] = set()
        self.model_control_error: str | None = None

    def log(self, level: int, message: str, filename: str, line: int) -> None:
        self.logs.append((level, message, filename, line))

    def send_response(
        self, request: InferenceRequest, response: InferenceResponse | None, flags: int
    ) -> None:
        if self.send_error is not None:
            raise TritonModelException(self.send_error)
        self.sent.append((request, response, flags))

    def is_cancelled(self, request: InferenceRequest) -> bool:
        self.cancel_queries += 1
        return request._key in self.cancelled

    def bls_allowed(self) -> bool:
        return True

    def bls_exec(
        self, request: InferenceRequest, decoupled: bool
    ) -> InferenceResponse | ResponseIterator:
        self.bls_calls.append((request, decoupled))
        if self.bls is None:
            raise TritonModelException(f"Model '{request.model_name()}' is not ready")
        return self.bls(request, decoupled)

    def metric_family_new(self, family: MetricFamily) -> None:
        if self.metric_error is not None:
            raise TritonModelException(self.metric_error)
        for name, _, kind in self.families.values():
            if name == family.name and kind != family.kind:
                raise TritonModelException(
                    f"metric family '{name}' already exists with a different kind"
                )
        self.families[family.id] = (family.name, family.description, int(family.kind))

    def metric_family_delete(self, family: MetricFamily) -> None:
        self.families.pop(family.id, None)
        self.deleted_families.append(family.id)

    def metric_new(self, metric: Metric) -> None:
        if self.metric_error is not None:
            raise TritonModelException(self.metric_error)
        self.metrics[metric.id] = {
            "family": metric.family_id, "labels": metric.labels,
            "buckets": metric.buckets, "value": 0.0, "observed": [],
        }

    def metric_delete(self, metric: Metric) -> None:
        self.metrics.pop(metric.id, None)
        self.deleted_metrics.append(metric.id)

    def metric_op(self, metric: Metric, op: str, value: float) -> float:
        if self.metric_error is not None:
            raise TritonModelException(self.metric_error)
        state = self.metrics[metric.id]
        if op == "increment":
            state["value"] += value
        elif op == "set":
            state["value"] = value
        elif op == "observe":
            state["observed"].append(value)
        return float(state["value"])

    def load_model(self, name: str, config: str, files: dict[str, bytes] | None) -> None:
        if self.model_control_error is not None:
            raise TritonModelException(self.model_control_error)
        self.loaded[name] = (config, files)
        self.ready.add((name, ""))

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        if self.model_control_error is not None:
            raise TritonModelException(self.model_control_error)
        self.unloaded.append((name, unload_dependents))
        self.ready.discard((name, ""))

    def is_model_ready(self, name: str, version: str) -> bool:
        if self.model_control_error is not None:
            raise TritonModelException(self.model_control_error)
        return (name, version) in self.ready


@contextlib.contextmanager
def installed(runtime: Any) -> Iterator[Any]:
    """Install `runtime` for the block, then restore whatever was installed before."""
    previous = get_runtime()
    set_runtime(runtime)
    try:
        yield runtime
    finally:
        set_runtime(previous)
