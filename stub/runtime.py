"""The stub's implementation of `backend_utils._runtime.Runtime`: the model's way out."""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import TYPE_CHECKING, Protocol

from backend_utils.constants import TRITONSERVER_RESPONSE_COMPLETE_FINAL
from backend_utils.error import TritonModelException
from stub import protocol as p
from stub.log_levels import LogLevels
from stub.memory import StubMemory
from stub.responses import response_msg

if TYPE_CHECKING:
    from backend_utils.request import InferenceRequest
    from backend_utils.response import InferenceResponse
    from stub.bls import BlsClient
    from stub.calls import Calls


class StubLink(Protocol):
    """What the runtime asks of its stub (stub.py's `Stub`). Every member may be used
    from any thread: the model's, the main one's, the asyncio loop's, a finaliser's."""

    log_levels: LogLevels
    """The server's log settings, as the stub last applied them."""

    calls: Calls
    """Calls to the parent that wait for its answer."""

    bls: BlsClient
    """BLS requests through the parent."""

    def send(self, message: tuple) -> None:
        """Put a message on the up queue (blocks while the queue is full)."""

    def respond(self, key: int, response: tuple | None, flags: int) -> None:
        """Send a SEND of request `key` (its ResponseMsg or None, its flags) to whoever
        sent the request: the parent, or a frontend process."""

    def sending(self) -> bool:
        """Whether a send is under way now (a finaliser must not wait for it)."""

    def request_closed(self, key: int) -> None:
        """The request had its final response: forget it."""

    def bls_allowed(self) -> bool:
        """Whether `initialize` returned and `finalize` has not started."""


class StubRuntime:
    """Every call turns into a message to the parent on the stub's up queue. `memory`
    is where responses are written (None: a runtime that sends none, in tests)."""

    def __init__(self, stub: StubLink, decoupled: bool, memory: StubMemory | None = None
                 ) -> None:
        self._stub = stub
        self._pid = os.getpid()  # BLS works in this process only (_check_own_process)
        self._memory = memory
        self.decoupled = decoupled
        self._cancelled: set[int] = set()
        self._coroutines: dict[int, tuple] = {}
        self._lock = threading.Lock()
        self._notices: deque[tuple] = deque()  # NOTIFYs from finalisers, not yet sent
        self._notices_lock = threading.Lock()

    # -- logging ----------------------------------------------------------------------
    def log(self, level: int, message: str, filename: str, line: int) -> None:
        if not self._stub.log_levels.enabled(level):
            return
        self._stub.send(p.log(int(level), message, filename, line))

    # -- responses --------------------------------------------------------------------
    def send_response(self, request: "InferenceRequest", response: "InferenceResponse | None",
                      flags: int) -> None:
        key = request._key
        msg = None
        if response is not None:
            msg = response_msg(response, request._requested_output_names, self._memory,
                               request._output_shm, request._gpu_outputs)
        self._stub.respond(key, msg, int(flags))
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
        if not self._cancelled and not self._coroutines:
            return  # the common case: nothing was cancelled or watched, no lock to take
        with self._lock:
            self._cancelled.discard(key)
            self._coroutines.pop(key, None)

    def all_cancelled(self, keys: list[int]) -> bool:
        """Whether every one of these requests was cancelled (before they started)."""
        if not self._cancelled:
            return False  # the common case, without the lock
        with self._lock:
            return all(key in self._cancelled for key in keys)

    def is_cancelled(self, request: "InferenceRequest") -> bool:
        """The parent pushes cancellations to the stub, so asking costs no round trip."""
        with self._lock:
            return request._key in self._cancelled

    # -- BLS --------------------------------------------------------------------------
    def bls_allowed(self) -> bool:
        return self._stub.bls_allowed()

    def bls_exec(self, request: "InferenceRequest", decoupled: bool):
        self._check_own_process()
        return self._stub.bls.exec(request, decoupled)

    async def bls_async_exec(self, request: "InferenceRequest", decoupled: bool):
        """pbserve's addition: `async_exec` waits on the loop instead of a thread."""
        self._check_own_process()
        return await self._stub.bls.async_exec(request, decoupled)

    def _check_own_process(self) -> None:
        """A process the model forked (a multiprocessing Pool) shares the stub's queues
        but not the threads that read its answers: its call would wait forever. It is
        refused at once instead, as an error response (README, "Where pbserve differs")."""
        if os.getpid() != self._pid:
            raise TritonModelException(
                "BLS from a process the model forked is not supported by pbserve: call "
                "exec() in the model's own process (threads and async_exec work)")

    # -- custom metrics: calls to the parent, which keeps them --------------------------
    def metric_family_new(self, family) -> None:
        self._send_notices()
        self._stub.calls.call("metric_family_new", family.id, family.name,
                              family.description, int(family.kind))

    def metric_family_delete(self, family) -> None:
        self._notice("metric_family_delete", family.id)

    def metric_new(self, metric) -> None:
        self._send_notices()
        self._stub.calls.call("metric_new", metric.id, metric.family_id, metric.labels,
                              metric.buckets)

    def metric_delete(self, metric) -> None:
        self._notice("metric_delete", metric.id)

    def metric_op(self, metric, op, value) -> float:
        self._send_notices()
        return float(self._stub.calls.call("metric_op", metric.id, op, float(value)))

    def _notice(self, op: str, *args) -> None:
        """From a finaliser, so it must neither block nor raise: queue a NOTIFY and send
        what is queued unless a send is under way (maybe in this very thread, which the
        garbage collector interrupted); then the next metric call or delete sends it."""
        self._notices.append(p.notify(op, args))
        self._send_notices()

    def _send_notices(self) -> None:
        if not self._notices:
            return
        if self._stub.sending() or not self._notices_lock.acquire(blocking=False):
            return
        try:
            while self._notices:
                self._stub.send(self._notices.popleft())
        except Exception:  # noqa: BLE001 - the stub is closing: the parent forgets it all
            self._notices.clear()
        finally:
            self._notices_lock.release()

    # -- model control: calls the parent answers with its model manager ----------------
    def load_model(self, name, config, files) -> None:
        self._stub.calls.call("load_model", name, config, files)

    def unload_model(self, name, unload_dependents) -> None:
        self._stub.calls.call("unload_model", name, bool(unload_dependents))

    def is_model_ready(self, name, version) -> bool:
        return bool(self._stub.calls.call("is_model_ready", name, version))
