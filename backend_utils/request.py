"""`InferenceRequest`: a request handed to `execute`, or one a model builds for BLS.

Incoming requests are built by the stub with `InferenceRequest._incoming(...)`; the
public constructor is Triton's BLS constructor. Everything that needs the server
(cancellation, BLS, sending) goes through the installed runtime.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ._parameters import parameters_to_json
from ._runtime import get_runtime, require_runtime
from ._strings import as_str
from .constants import TRITONSERVER_REQUEST_RELEASE_ALL, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
from .error import TritonModelException
from .preferred_memory import PreferredMemory
from .response import InferenceResponse, _error_response
from .response_iterator import ResponseIterator
from .response_sender import InferenceResponseSender
from .tensor import Tensor
from .trace import InferenceTrace

_REQUIRED: Any = object()
BLS_OUTSIDE_EXECUTE = "BLS is only supported during the 'execute' function."
_UINT32_MAX = 2**32 - 1
_UINT64_MAX = 2**64 - 1
# An incoming request makes its sender, trace and preferred memory on first use (most
# are never asked for); this lock makes that happen once per request, from any thread.
_LAZY_LOCK = threading.Lock()


def _check_int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise TypeError(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


def _check_bls_allowed(runtime: Any) -> None:
    """Triton refuses BLS while the model initializes or finalizes (an exception, not an
    error response); a runtime without `bls_allowed` allows it always."""
    allowed = getattr(runtime, "bls_allowed", None)
    if allowed is not None and not allowed():
        raise TritonModelException(BLS_OUTSIDE_EXECUTE)


class InferenceRequest:
    """Triton's `InferenceRequest(request_id="", correlation_id=0, inputs, requested_output_names,
    model_name, model_version=-1, flags=0, timeout=0, preferred_memory=PreferredMemory(default),
    trace=InferenceTrace(), parameters=None)` for BLS; `timeout` is in microseconds."""

    __slots__ = (
        "_inputs", "_request_id", "_correlation_id", "_requested_output_names",
        "_model_name", "_model_version", "_flags", "_timeout", "_preferred_memory",
        "_trace", "_parameters", "_key", "_is_incoming", "_release_flags",
        "_cancelled", "_sender", "_output_shm", "_gpu_outputs", "__weakref__",
    )

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: list[Tensor] = _REQUIRED,
        requested_output_names: list[str] = _REQUIRED,
        model_name: str = _REQUIRED,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        missing = [
            name for name, value in (
                ("inputs", inputs),
                ("requested_output_names", requested_output_names),
                ("model_name", model_name),
            ) if value is _REQUIRED
        ]
        if missing:
            raise TypeError(
                "InferenceRequest() missing required argument(s): " + ", ".join(missing)
            )
        request_id = as_str("request_id", request_id)
        model_name = as_str("model_name", model_name)
        model_version = _check_int("model_version", model_version, -(2**63), 2**63 - 1)
        flags = _check_int("flags", flags, 0, _UINT32_MAX)
        timeout = _check_int("timeout", timeout, 0, _UINT64_MAX)
        if preferred_memory is None:
            preferred_memory = PreferredMemory._default()
        elif not isinstance(preferred_memory, PreferredMemory):
            raise TypeError("preferred_memory must be a PreferredMemory")
        if trace is None:
            trace = InferenceTrace()
        elif not isinstance(trace, InferenceTrace):
            raise TypeError("trace must be an InferenceTrace")
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"inputs must be a list of Tensor, got {type(inputs).__name__}")
        for tensor in inputs:
            if tensor is not None and not isinstance(tensor, Tensor):
                raise TypeError(f"inputs must be a list of Tensor, found {type(tensor).__name__}")
        if isinstance(requested_output_names, (str, bytes)) or not isinstance(
            requested_output_names, Iterable
        ):
            raise TypeError("requested_output_names must be a list of str")
        names = [as_str("requested output name", name) for name in requested_output_names]

        if correlation_id is None:  # Triton's binding refuses None before it looks inside
            raise TypeError("correlation_id must be an int or a str, got None")
        parameters_json = parameters_to_json(parameters)
        if isinstance(correlation_id, int):
            if not 0 <= correlation_id <= _UINT64_MAX:
                raise TritonModelException(
                    "Correlation ID must be an unsigned 64-bit integer or a string"
                )
            correlation_id = int(correlation_id)
        elif not isinstance(correlation_id, str):
            raise TritonModelException("Correlation ID must be integer or string")
        for tensor in inputs:
            if tensor is None:
                raise TritonModelException(
                    f"Input tensor for request with id '{request_id}' and model name "
                    f"'{model_name}' should not be empty."
                )
        for name in names:
            if name == "":
                raise TritonModelException(
                    f"Requested output name for request with id '{request_id}' and "
                    f"model name '{model_name}' should not be empty."
                )

        self._inputs = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._requested_output_names = set(names)
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory = preferred_memory
        self._trace = trace
        self._parameters = parameters_json
        self._key: Any = None
        self._is_incoming = False
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._cancelled = False
        self._sender: InferenceResponseSender | None = None
        self._output_shm: dict | None = None
        self._gpu_outputs = False

    @classmethod
    def _incoming(
        cls,
        *,
        inputs: list[Tensor],
        request_id: str,
        correlation_id: int | str,
        flags: int,
        parameters_json: str,
        timeout: int,
        requested_output_names: Iterable[str],
        model_name: str,
        model_version: int,
        key: Any,
        trace: InferenceTrace | None = None,
        output_shm: dict | None = None,
        gpu_outputs: bool = False,
    ) -> InferenceRequest:
        """A request the server sent to this model; `key` is the runtime's handle for it.
        `output_shm`: where the server wants outputs written; `gpu_outputs`: whether GPU
        outputs may stay on the GPU (the runtime's business).

        No validation: the server already checked everything.
        """
        request = cls.__new__(cls)
        request._inputs = inputs
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._requested_output_names = set(requested_output_names)
        request._model_name = model_name
        request._model_version = model_version
        request._flags = flags
        request._timeout = timeout
        request._preferred_memory = None  # made on first use, as `_trace` and `_sender`
        request._trace = trace
        request._parameters = parameters_json or "{}"
        request._key = key
        request._is_incoming = True
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        request._cancelled = False
        request._sender = None
        request._output_shm = output_shm
        request._gpu_outputs = gpu_outputs
        return request

    # -- Triton's accessors ------------------------------------------------------------

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        """Sequence flags (TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END)."""
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = _check_int("flags", flags, 0, _UINT32_MAX)

    def timeout(self) -> int:
        """Timeout in microseconds, 0 for none."""
        return self._timeout

    def parameters(self) -> str:
        """JSON text of the request parameters (use json.loads)."""
        return self._parameters

    def trace(self) -> InferenceTrace:
        trace = self._trace
        return trace if trace is not None else self._make_once("_trace", InferenceTrace)

    def requested_output_names(self) -> set[str]:
        return set(self._requested_output_names)

    def get_response_sender(self) -> InferenceResponseSender:
        """The request's sender; the same object on every call (from any thread).

        Only an incoming request's sender is bound to a response channel.
        """
        sender = self._sender
        if sender is not None:
            return sender
        return self._make_once(
            "_sender", lambda: InferenceResponseSender(self, bound=self._is_incoming))

    def is_cancelled(self) -> bool:
        """Asks the server until the answer is True, then remembers it."""
        if self._cancelled:
            return True
        if not self._is_incoming:
            return False
        runtime = require_runtime("InferenceRequest.is_cancelled")
        if runtime.is_cancelled(self):
            self._cancelled = True
        return self._cancelled

    def set_release_flags(self, flags: int) -> None:
        """TRITONSERVER_REQUEST_RELEASE_RESCHEDULE asks the sequence batcher to run this
        request again (needs `iterative_sequence`)."""
        if isinstance(flags, bool) or not isinstance(flags, int):
            raise TypeError(f"release flags must be an int, got {type(flags).__name__}")
        if flags not in (TRITONSERVER_REQUEST_RELEASE_ALL, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE):
            raise TritonModelException(
                f"Unsupported release flags {flags}: use TRITONSERVER_REQUEST_RELEASE_ALL "
                "or TRITONSERVER_REQUEST_RELEASE_RESCHEDULE"
            )
        self._release_flags = flags

    # -- pbserve accessors (Triton has none; the runtime reads them for BLS) --------------

    def release_flags(self) -> int:
        return self._release_flags

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def preferred_memory(self) -> PreferredMemory:
        memory = self._preferred_memory
        if memory is not None:
            return memory
        return self._make_once("_preferred_memory", PreferredMemory._default)

    def _make_once(self, attribute: str, make: Callable[[], Any]) -> Any:
        """The value of `attribute`, set to `make()` if still None: the same object for
        every caller, whichever thread asks first."""
        with _LAZY_LOCK:
            value = getattr(self, attribute)
            if value is None:
                value = make()
                setattr(self, attribute, value)
        return value

    # -- BLS -----------------------------------------------------------------------------

    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on `model_name` and wait for the result.

        Errors come back as a response with `has_error()`, not as an exception; with
        `decoupled=True` the result is a `ResponseIterator`.
        """
        if not isinstance(decoupled, bool):
            raise TypeError(f"decoupled must be a bool, got {type(decoupled).__name__}")
        runtime = require_runtime("InferenceRequest.exec (BLS)")
        _check_bls_allowed(runtime)
        try:
            return runtime.bls_exec(self, decoupled)
        except TritonModelException as exc:
            response = _error_response(str(exc))
            if not decoupled:
                return response
            iterator = ResponseIterator()
            iterator._put(response, True)
            return iterator

    def async_exec(
        self, decoupled: bool = False
    ) -> asyncio.Future[InferenceResponse | ResponseIterator]:
        """`exec` awaited on the running loop; must be called inside a coroutine.

        A runtime with `bls_async_exec` (pbserve's stub) waits on the loop itself, so any
        number of calls can be in flight; otherwise `exec` runs on the loop's default
        executor, as in Triton. With `decoupled=True` the awaited iterator also supports
        `async for`.
        """
        if not isinstance(decoupled, bool):
            raise TypeError(f"decoupled must be a bool, got {type(decoupled).__name__}")
        loop = asyncio.get_running_loop()
        runtime = get_runtime()
        if getattr(runtime, "bls_async_exec", None) is not None:
            return asyncio.ensure_future(self._native_async_exec(runtime, decoupled))
        return loop.run_in_executor(None, self.exec, decoupled)

    async def _native_async_exec(self, runtime: Any, decoupled: bool) -> Any:
        _check_bls_allowed(runtime)  # raised when awaited, as Triton's executor call does
        return await runtime.bls_async_exec(self, decoupled)

    def __repr__(self) -> str:
        kind = "incoming" if self._is_incoming else "bls"
        return (
            f"InferenceRequest({kind}, id={self._request_id!r}, model={self._model_name!r}, "
            f"inputs={[t.name() for t in self._inputs]})"
        )
