"""BLS calls this stub sends to another stub itself, as a frontend process sends a client's
request (pbserve/frontends/direct.py): the core out of a BLS pipeline's path.

Only where the core would do nothing but pass the call on: a blocking `exec()` from the
main thread (which waits on its inbox anyway, stub/direct_replies.py), not decoupled,
untraced, without a timeout, its inputs on the host, with a server that runs frontend
processes (the stubs then wait on bells: stub/inbox.py). The core says which models
qualify and where their stubs are (`bls_route`, Model.caller_route; kept ROUTE_TTL_S):
it makes a pair of queues between this stub and each of the callee's, tells the callee
first (CALLER_QUEUES), and gives this stub its origin, whose key space its calls' keys
are in. Anything else, a call whose inputs do not plainly fit the callee's config (the
core then refuses it in Triton's words), and a callee found dead before the call (the
core waits for its successor) goes through the core as before.

A call is an EXECUTE of one request on the callee's queue; the callee answers on its
answer queue, which this stub's inbox reads, and posts this stub's bell. The answer's
outputs stay in the callee's pool, viewed here; once their arrays are gone their blocks
are owed to the callee, given back with the next call to it or after the execute that
made them (`after_execute`: on the main thread, never from a finaliser, which may run
in the middle of a put). What the calls add to the callee's statistics, and which to
cancel when the request they serve is cancelled, go to the core (NOTIFYs).
"""

from __future__ import annotations

import collections
import itertools
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any


from backend_utils.error import TritonError
from shm.cuda_region import is_cuda_token
from shm.queue import QueueFull
from stub import protocol as p
from stub.direct_counts import DirectCounts
from stub.direct_replies import DirectReplies
from stub.errors import RESCHEDULE_UNSUPPORTED
from stub.frontends import first_key
from stub.inbox import Inbox
from stub.peer import StubPeer

ROUTE_TTL_S = 1.0
STATS_INTERVAL_S = 0.1  # what the calls add to statistics goes to the core so often
Frees = tuple[tuple[str, int], ...]


class _Callee(StubPeer):
    """One stub this stub calls directly; `origin`: its answers' origin in the inbox
    (which reads and closes its answer queue)."""

    def __init__(self, requests: str, answers: str, bell: str, pid: int, instance: str,
                 origin: int) -> None:
        super().__init__(requests, answers, bell, pid, instance)
        self.origin = origin
        self.owed: collections.deque[tuple[str, int]] = collections.deque()  # any thread

    def alive(self) -> bool:
        """Whether its process still runs (its pidfd is readable once it ended)."""
        return self.pidfd >= 0 and not select.select([self.pidfd], [], [], 0)[0]

    def take_owed(self) -> Frees:
        owed = self.owed
        return tuple([owed.popleft() for _ in range(len(owed))])


class _Route:
    """A model this stub calls directly: what a call is checked against, and its stubs."""

    def __init__(self, version: str, max_batch_size: int, inputs: tuple, outputs: tuple,
                 callees: list[_Callee]) -> None:
        self.version = version
        self.max_batch_size = max_batch_size
        self.inputs = {name: (datatype, tuple(dims), optional)
                       for name, datatype, dims, optional in inputs}
        self.required = {name for name, (_, _, optional) in self.inputs.items()
                         if not optional}
        self.outputs = tuple(outputs)
        self.callees = callees
        self._turn = os.getpid()  # calls go round the instances, each caller from its own

    def next_callee(self) -> _Callee:
        """The instance this call goes to: in turn (a caller has one call in flight at a
        time; callers start at different instances)."""
        self._turn += 1
        return self.callees[self._turn % len(self.callees)]

    def fits(self, descs: tuple, requested: tuple) -> int | None:
        """The call's batch size (1 for a model that does not batch) if its inputs and
        requested outputs plainly fit the config; None if not (the core checks it)."""
        names = {d[0] for d in descs}
        if len(names) != len(descs) or not self.required <= names \
                or not names <= self.inputs.keys() \
                or any([name not in self.outputs for name in requested]):
            return None
        batch = 0
        for name, datatype, shape, region, _, _ in descs:
            want, dims, _ = self.inputs[name]
            if datatype != want or is_cuda_token(region):
                return None
            if self.max_batch_size > 0:
                if not shape or not 1 <= shape[0] <= self.max_batch_size \
                        or (batch and shape[0] != batch):
                    return None
                batch, shape = shape[0], shape[1:]
            if len(shape) != len(dims) or any(
                    [d != -1 and d != s for d, s in zip(dims, shape)]):
                return None
        return batch or 1


class DirectBls:
    """This stub's direct calls: `send` a message on the up queue, `call(op, *args)` a
    call to the core (Calls.call); `replies` is where the main thread waits."""

    def __init__(self, inbox: Inbox, replies: DirectReplies, send: Callable[[tuple], None],
                 call: Callable[..., Any]) -> None:
        self._inbox = inbox
        self._replies = replies
        self._send = send
        self._call = call
        self._routes: dict[tuple[str, str], tuple[float, _Route | None]] = {}
        self._callees: dict[tuple, _Callee] = {}
        self._keys: Any = None  # itertools.count from the origin the core gives
        # a call in flight: its key -> (model, version, callee, the requests it serves)
        self._inflight: dict[int, tuple[str, str, _Callee, frozenset]] = {}
        self._cancelled: set[int] = set()  # requests cancelled while calls serve them
        self._lock = threading.Lock()  # _inflight and _cancelled: the control thread too
        self._stats = DirectCounts()  # not told yet
        self._stats_sent_ns = 0

    def on_main_thread(self) -> bool:
        return self._replies.on_main_thread()

    # -- the route --------------------------------------------------------------------
    def _route(self, name: str, version: str) -> _Route | None:
        key = (name, version)
        kept = self._routes.get(key)
        now = time.monotonic()
        if kept is None or kept[0] < now:
            answer = self._call("bls_route", name, version)
            route = None
            if answer is not None:
                origin, model_version, max_batch_size, inputs, outputs, stubs = answer
                if self._keys is None:
                    self._keys = itertools.count(first_key(origin))
                try:
                    route = _Route(model_version, max_batch_size, inputs, outputs,
                                   [self._callee(tuple(s)) for s in stubs])
                except OSError:  # a stub ended meanwhile (its names are gone)
                    route = None
            for callee in [c for c in self._callees.values() if not c.alive()]:
                self._forget(callee)  # one no route names any more (its successor does)
            kept = self._routes[key] = (now + ROUTE_TTL_S, route)
        return kept[1]

    def _callee(self, names: tuple) -> _Callee:
        callee = self._callees.get(names)
        if callee is None:
            requests, answers, bell, pid, instance = names
            origin = -(len(self._callees) + 1)  # an inbox origin no frontend has
            while any([c.origin == origin for c in self._callees.values()]):
                origin -= 1
            callee = _Callee(requests, answers, bell, pid, instance, origin)
            self._inbox.set(origin, callee.answers)
            self._callees[names] = callee
        return callee

    def _forget(self, callee: _Callee) -> None:
        """A callee ended: no route names it any more."""
        for names, known in list(self._callees.items()):
            if known is callee:
                del self._callees[names]
        self._routes.clear()
        self._inbox.remove(callee.origin)
        callee.close()

    # -- a call -------------------------------------------------------------------------
    def exec(self, name: str, version: str, request_id: str, correlation_id: Any,
             flags: int, parameters: str, requested: tuple, descs: tuple,
             on_behalf_of: tuple, gpu_outputs: bool) -> tuple | None:
        """The answer of a call sent to the callee's stub directly: its ResponseMsg, and
        what gives its outputs back once their arrays are gone (None: it has none); None
        if the call goes through the core."""
        route = self._route(name, version)
        if route is None:
            return None
        batch = route.fits(descs, requested)
        if batch is None:
            return None
        callee = route.next_callee()
        if not callee.alive():  # restarting: the core waits for its successor
            self._forget(callee)
            return None
        key = next(self._keys)
        msg = p.request_msg(
            key=key, request_id=request_id, correlation_id=correlation_id, flags=flags,
            parameters_json=parameters or "{}", timeout_us=0,
            requested=requested or route.outputs, inputs=descs, lendable=False,
            output_shm=None, gpu_outputs=gpu_outputs)
        try:
            callee.send(p.execute(key, (msg,), callee.take_owed()))
        except QueueFull:
            return None
        with self._lock:
            self._inflight[key] = (name, route.version, callee, frozenset(on_behalf_of))
        sent_ns = time.monotonic_ns()
        try:
            answer = self._replies.wait_from(callee.origin, _answer_to(key), callee.alive)
        finally:
            with self._lock:
                self._inflight.pop(key, None)
        now = time.monotonic_ns()
        if answer is None:  # the callee died under the call
            self._forget(callee)
            self._stats.add(name, route.version, batch, True, now - sent_ns, now - sent_ns)
            return p.response_record((int(TritonError.INTERNAL), (
                f"Stub process '{callee.instance}' is not healthy: it exited while model "
                f"'{name}' was running")), (), "{}"), None
        kind, _, error, responses, _ = answer
        failed = error is not None or kind == p.DROPPED
        self._stats.add(name, route.version, batch, failed, now - sent_ns,
                        now - sent_ns)  # (the call's time is its compute time too)
        if error is not None:
            return p.response_record((int(TritonError.INTERNAL), error), (), "{}"), None
        ((_, response),) = responses
        if response is None:  # released with RESCHEDULE: the default scheduler refuses it
            return p.response_record((int(TritonError.INVALID_ARG), RESCHEDULE_UNSUPPORTED),
                                     (), "{}"), None
        outputs = response[p.RESP_OUTPUTS]
        if not outputs:
            return response, None
        frees = p.output_blocks(outputs)
        return response, lambda: callee.owed.extend(frees)

    # -- cancellation (the control thread) -----------------------------------------------
    def cancelled(self, key: int) -> None:
        """Request `key` of this stub was cancelled: cancel the calls made for it (a call
        made for several requests once all of them are)."""
        with self._lock:
            if not self._inflight:
                return
            self._cancelled.add(key)
            calls = [(call, name, version, callee) for call, (name, version, callee, keys)
                     in self._inflight.items() if key in keys and keys <= self._cancelled]
        for call, name, version, callee in calls:
            self._send(p.notify("cancel_direct", (name, version, callee.instance, call)))

    def forget_request(self, key: int) -> None:
        """Request `key` ended."""
        if self._cancelled:
            with self._lock:
                self._cancelled.discard(key)

    # -- on the main thread, after each execute ------------------------------------------
    def after_execute(self) -> None:
        """Give the callees back the outputs whose arrays are gone, and tell the core what
        the calls added to statistics (not more often than STATS_INTERVAL_S)."""
        for callee in list(self._callees.values()):
            if callee.owed:
                frees = callee.take_owed()
                try:
                    callee.send(p.release(frees))
                except QueueFull:
                    callee.owed.extend(frees)
        if self._stats and time.monotonic_ns() - self._stats_sent_ns \
                >= STATS_INTERVAL_S * 1e9:
            self._stats_sent_ns = time.monotonic_ns()
            self._send(p.notify("direct_stats", (self._stats.take(),)))

    def owes(self) -> bool:
        """Whether `after_execute` has something to send."""
        return bool(self._stats) or any([c.owed for c in self._callees.values()])


def _answer_to(key: int) -> Callable[[bytes], tuple | None]:
    """What picks the answer to call `key` out of the callee's messages."""
    def answer(raw: bytes) -> tuple | None:
        message = p.decode(raw)
        kind, batch_id, *_ = message
        return message if batch_id == key and kind in (p.RESPONSES, p.DROPPED) else None
    return answer
