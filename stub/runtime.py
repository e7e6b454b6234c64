"""The stub's implementation of `backend_utils._runtime.Runtime`: the model's way out."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from backend_utils.constants import TRITONSERVER_RESPONSE_COMPLETE_FINAL
from backend_utils.error import TritonModelException
from stub import protocol as p
from stub.responses import response_msg

if TYPE_CHECKING:
    from backend_utils.request import InferenceRequest
    from backend_utils.response import InferenceResponse
    from stub.stub import Stub

_LATER = "is not supported by this version of pbserve yet"


class StubRuntime:
    """Every call turns into a message to the parent on the stub's up queue."""

    def __init__(self, stub: "Stub", decoupled: bool) -> None:
        self._stub = stub
        self.decoupled = decoupled
        self._cancelled: set[int] = set()
        self._coroutines: dict[int, tuple] = {}
        self._lock = threading.Lock()

    # -- logging ----------------------------------------------------------------------
    def log(self, level: int, message: str, filename: str, line: int) -> None:
        self._stub.send((p.LOG, int(level), message, filename, line))

    # -- responses --------------------------------------------------------------------
    def send_response(self, request: "InferenceRequest", response: "InferenceResponse | None",
                      flags: int) -> None:
        key = request._key
        msg = None
        if response is not None:
            msg = response_msg(response, request.requested_output_names(), self._stub.pool,
                               self._stub.borrowed)
        self._stub.send((p.SEND, key, msg, int(flags)))
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self._stub.request_closed(key)

    # -- cancellation -----------------------------------------------------------------
    def mark_cancelled(self, key: int) -> None:
        """Remember the cancellation; with the opt-in, also cancel a coroutine once every
        request it serves is cancelled (asyncio.CancelledError inside the model)."""
        with self._lock:
            self._cancelled.add(key)
            watched = self._coroutines.pop(key, None)
            if watched is None:
                return
            keys, future = watched
            if not all(k in self._cancelled for k in keys):
                return
            for k in keys:
                self._coroutines.pop(k, None)
        future.cancel()

    def watch_coroutine(self, keys: tuple, future) -> None:
        """The opt-in (`pbserve.cancel_coroutines`): `future` runs for these requests."""
        with self._lock:
            for key in keys:
                self._coroutines[key] = (keys, future)
        future.add_done_callback(lambda _: self._unwatch(keys))

    def _unwatch(self, keys: tuple) -> None:
        with self._lock:
            for key in keys:
                self._coroutines.pop(key, None)

    def forget(self, key: int) -> None:
        with self._lock:
            self._cancelled.discard(key)
            self._coroutines.pop(key, None)

    def is_cancelled(self, request: "InferenceRequest") -> bool:
        """The parent pushes cancellations to the stub, so asking costs no round trip."""
        with self._lock:
            return request._key in self._cancelled

    # -- later issues -----------------------------------------------------------------
    def bls_exec(self, request: "InferenceRequest", decoupled: bool):
        return self._stub.bls.exec(request, decoupled)

    async def bls_async_exec(self, request: "InferenceRequest", decoupled: bool):
        """pbserve's addition: `async_exec` waits on the loop instead of a thread."""
        return await self._stub.bls.async_exec(request, decoupled)

    def metric_family_new(self, family) -> None:
        raise TritonModelException(f"custom metrics {_LATER}")

    def metric_family_delete(self, family) -> None:
        pass

    def metric_new(self, metric) -> None:
        raise TritonModelException(f"custom metrics {_LATER}")

    def metric_delete(self, metric) -> None:
        pass

    def metric_op(self, metric, op, value) -> float:
        raise TritonModelException(f"custom metrics {_LATER}")

    def load_model(self, name, config, files) -> None:
        raise TritonModelException(f"load_model {_LATER}")

    def unload_model(self, name, unload_dependents) -> None:
        raise TritonModelException(f"unload_model {_LATER}")

    def is_model_ready(self, name, version) -> bool:
        raise TritonModelException(f"is_model_ready {_LATER}")
