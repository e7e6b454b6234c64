"""The one seam between the model-facing API and the process it runs in.

API objects never talk to the server directly: the stub installs an object that
satisfies `Runtime` with `set_runtime`, and every call that needs the server
goes through it. With no runtime installed (unit tests, a model imported in a
plain interpreter) those calls raise `TritonModelException` instead of hanging.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .error import TritonModelException

if TYPE_CHECKING:
    from .metrics import Metric, MetricFamily
    from .request import InferenceRequest
    from .response import InferenceResponse
    from .response_iterator import ResponseIterator


@runtime_checkable
class Runtime(Protocol):
    """What the stub provides. Every method may block; none is called with a lock held
    except `send_response`, which is called under its sender's lock so one request's
    responses reach the runtime in the order they were validated."""

    decoupled: bool
    """The model's transaction policy (`model_transaction_policy.decoupled`)."""

    def log(self, level: int, message: str, filename: str, line: int) -> None:
        """Emit one log line; `level` is a `Logger.LogLevel` value (INFO=0 .. VERBOSE=3)."""

    def send_response(
        self, request: InferenceRequest, response: InferenceResponse | None, flags: int
    ) -> None:
        """Deliver a response for `request` (already validated by the sender).

        Blocks until delivered; raises `TritonModelException` on failure. Outputs are
        not pruned to the requested names here: that is the runtime's job.
        """

    def is_cancelled(self, request: InferenceRequest) -> bool:
        """Whether the client cancelled `request` (asked until it first says True)."""

    def bls_allowed(self) -> bool:
        """False while the model's `initialize` or `finalize` runs (Triton allows BLS
        from `execute` and from threads running after `initialize`)."""

    def bls_exec(
        self, request: InferenceRequest, decoupled: bool
    ) -> InferenceResponse | ResponseIterator:
        """Run a BLS request; an `InferenceResponse`, or a `ResponseIterator` when decoupled."""

    def metric_family_new(self, family: MetricFamily) -> None: ...

    def metric_family_delete(self, family: MetricFamily) -> None:
        """Called from the family's finaliser: do not keep a reference to `family`."""

    def metric_new(self, metric: Metric) -> None: ...

    def metric_delete(self, metric: Metric) -> None:
        """Called from the metric's finaliser: do not keep a reference to `metric`."""

    def metric_op(self, metric: Metric, op: str, value: float) -> float:
        """`op` is "increment", "set", "observe" or "value"; returns the value for "value"."""

    def load_model(self, name: str, config: str, files: dict[str, bytes] | None) -> None: ...

    def unload_model(self, name: str, unload_dependents: bool) -> None: ...

    def is_model_ready(self, name: str, version: str) -> bool: ...


_runtime: Runtime | None = None


def set_runtime(runtime: Runtime | None) -> None:
    """Install (or, with None, remove) the runtime; the stub calls this once at start."""
    global _runtime
    _runtime = runtime


def get_runtime() -> Runtime | None:
    return _runtime


def require_runtime(what: str) -> Runtime:
    """The installed runtime, or the error a model sees when it runs outside one."""
    runtime = _runtime
    if runtime is None:
        raise TritonModelException(
            f"{what} needs a running model (pbserve stub); no runtime is installed."
        )
    return runtime
