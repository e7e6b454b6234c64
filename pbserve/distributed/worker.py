"""A worker: serves its ModelManager's models to the request plane.

For each ready model it pulls requests from the model's shared durable consumer, at most
as many at a time as the model can run at once (its instances times its max batch size;
for a decoupled model, DECOUPLED_IN_FLIGHT times that), so a busy worker leaves the next
request to another. A request's inbox gets an
"accepted" message naming this worker, then every response. A heartbeat puts the
worker's registry entries again (keeping them inside the bucket's TTL) and follows the
models its manager loads or unloads. `stop` deletes its entries and stops pulling.
A request's inputs sent by descriptor are pulled from their holder before it runs; a
response's large outputs stay in their shared memory, held for the caller to pull
(data_plane.py), and the response is released once they are pulled or expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from pbserve.core.manager import READY, ModelManager
from pbserve.distributed.codec import (
    decode_request, encode_accepted, encode_error, encode_response)
from pbserve.distributed.data_plane import DataPlane, HeldGroup
from pbserve.distributed.registry import Entry, Registry
from pbserve.distributed.statistics import StatisticsResponder
from pbserve.distributed.request_plane import (
    REPLY_HEADER, STREAM, CANCEL_SUBJECT, infer_subject, token)
from pbserve.errors import ErrorCode, ServerError
from pbserve.task_stop import cancel_and_wait

log = logging.getLogger("pbserve.distributed")

# How long one pull waits on the server before it is asked again (a pull of a worker
# that died expires within it).
PULL_S = 1.0
# A request delivered but not acknowledged (its worker died at that instant) goes to
# another worker after this long.
ACK_WAIT_S = 5.0
# Requests of a decoupled model a worker takes per instance: its execute returns (and
# the instance takes the next request, an async execute runs them together) while the
# earlier ones still stream; more wait in the model's own queue.
DECOUPLED_IN_FLIGHT = 8
# Cancellations of requests not pulled yet that a worker remembers (the oldest go).
CANCELLED_KEPT = 10_000


class PlaneWorker:
    def __init__(self, manager: ModelManager, nc: Client, js: JetStreamContext,
                 registry: Registry, heartbeat_s: float, data_plane: DataPlane,
                 max_input_bytes: int) -> None:
        self._manager = manager
        self._data_plane = data_plane
        self._max_input_bytes = max_input_bytes  # pulled for one request, at most
        self._nc = nc
        self._js = js
        self._registry = registry
        self._heartbeat_s = heartbeat_s
        self.name = registry.worker
        self._feeds: dict[str, _Feed] = {}
        self._serving: dict[str, asyncio.Task] = {}  # inbox -> the task serving it
        self._held: dict[str, set[HeldGroup]] = {}  # inbox -> its outputs not pulled yet
        self._cancelled: OrderedDict[str, None] = OrderedDict()  # inboxes not pulled yet
        self._beat: asyncio.Task | None = None
        self._cancel_sub = None
        self._statistics = StatisticsResponder(manager, nc, self.name)

    async def start(self) -> None:
        self._cancel_sub = await self._nc.subscribe(CANCEL_SUBJECT, cb=self._on_cancel)
        await self._statistics.start()
        await self.sync()
        self._beat = asyncio.create_task(self._heartbeat(), name="pbserve-heartbeat")
        log.info("worker '%s' serving %s on the request plane", self.name,
                 sorted(self._feeds) or "no model")

    async def stop(self, grace_s: float) -> None:
        """Leave the registry, stop pulling, let requests in flight finish (`grace_s`),
        then cancel those left."""
        await cancel_and_wait(self._beat)
        # Cut off from the plane, each delete would wait out its timeout: the TTL ends
        # the entries then.
        if self._nc.is_connected:
            with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
                await self._registry.remove_all()
        await asyncio.gather(*(f.stop() for f in self._feeds.values()))
        self._feeds.clear()
        tasks = list(self._serving.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            await cancel_and_wait(pending)
        if self._cancel_sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._cancel_sub.unsubscribe()
        await self._statistics.stop()

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            try:
                await self.sync()
            except (nats.errors.Error, asyncio.TimeoutError) as err:
                log.warning("worker '%s': registry not refreshed: %s", self.name, err)

    async def sync(self) -> None:
        """Registry entries and pulls to match the manager's models now (also at once
        after a reconnection to the plane, node.py, and after a load or unload,
        model_control.py)."""
        entries = self._entries()
        for name in set(self._feeds) - {n for n, e in entries.items() if e["state"] == READY}:
            await self._feeds.pop(name).stop()
        for name in set(self._registry.models()) - set(entries):
            await self._registry.remove(name)
        for name, entry in entries.items():
            if entry["state"] == READY and name not in self._feeds:
                model = self._manager.model(name)
                capacity = len(model.instances) * max(1, model.cfg.max_batch_size)
                if model.decoupled:  # an instance is free again once execute returns
                    capacity *= DECOUPLED_IN_FLIGHT
                self._feeds[name] = _Feed(self, name, capacity)
                await self._feeds[name].start()
            await self._registry.put(entry)

    def _entries(self) -> dict[str, Entry]:
        rows: dict[str, list[dict]] = {}
        for row in self._manager.repository_index():
            rows.setdefault(row["name"], []).append(row)
        entries = {}
        for name, found in rows.items():
            ready = [r["version"] for r in found if r.get("state") == READY]
            entry: Entry = {"model": name, "versions": ready,
                            "state": READY if ready else found[0].get("state", "UNAVAILABLE"),
                            "reason": "" if ready else found[0].get("reason", ""),
                            "config": None, "metadata": None}
            if ready:
                try:
                    entry["config"] = self._manager.model_config(name)
                    entry["metadata"] = self._manager.model_metadata(name)
                except ServerError:  # unloaded in between: not ready after all
                    entry["state"], entry["versions"] = "UNAVAILABLE", []
            entries[name] = entry
        return entries

    async def _on_cancel(self, msg: Msg) -> None:
        inbox = msg.data.decode()
        # Outputs its caller will not pull now: freed (with their shared memory) at once,
        # not when their TTL passes.
        for held in self._held.pop(inbox, ()):
            held.free()
        task = self._serving.get(inbox)
        if task is not None:
            task.cancel()
            return
        # Not here (yet): its caller gave up while it waited in the stream. Remembered,
        # so that it is dropped unrun if this worker pulls it later.
        self._cancelled[inbox] = None
        while len(self._cancelled) > CANCELLED_KEPT:
            self._cancelled.popitem(last=False)

    async def serve(self, msg: Msg) -> None:
        """One request: accepted, then its responses, then done (errors are responses)."""
        inbox = (msg.headers or {}).get(REPLY_HEADER, "")
        if not inbox:
            log.warning("worker '%s': a request without a reply inbox dropped", self.name)
            await _ack(msg)
            return
        if self._cancelled.pop(inbox, False) is None:
            await _ack(msg)
            return  # cancelled before any worker took it: nobody waits for an answer
        task = asyncio.current_task()
        assert task is not None
        self._serving[inbox] = task
        model = ""
        try:
            # "accepted" before the ack, in one flush: killed before both reach the NATS
            # server, the request goes to another worker (ACK_WAIT_S); after, its caller
            # knows whose it is and fails it once that worker is gone. An ack sent alone
            # first would leave a request no worker answers and nobody fails.
            await self._nc.publish(inbox, encode_accepted(self.name, self._registry.instance))
            await _ack(msg)
            request, stream = decode_request(msg.data)
            model = request.model_name
            await self._data_plane.fill(request.inputs, "the caller", self._max_input_bytes)
            if stream:
                async for response in self._manager.stream_infer(request):
                    await self._send(inbox, response)
            else:
                await self._send(inbox, await self._manager.infer(request))
        except ServerError as err:
            await self._send_error(inbox, err, model)
        except asyncio.CancelledError:
            await self._send_error(inbox, ServerError(ErrorCode.CANCELLED,
                                                      "request cancelled"), model)
        except Exception as err:  # noqa: BLE001 - a bad message never ends the worker
            log.exception("worker '%s': request for '%s' failed", self.name, model)
            await self._send_error(inbox, ServerError(ErrorCode.INTERNAL, str(err)), model)
        finally:
            self._serving.pop(inbox, None)

    async def _send(self, inbox: str, response) -> None:
        """Large outputs are held (the response released once they are pulled, or its
        caller cancels)."""
        def freed() -> None:
            response.release()
            groups = self._held.get(inbox)
            if groups is not None:
                groups.discard(held)
                if not groups:
                    del self._held[inbox]

        held = self._data_plane.group(on_free=freed)
        try:
            payload = encode_response(response, self.name, held)
            if len(payload) > self._nc.max_payload:
                raise ServerError(ErrorCode.UNSUPPORTED, f"response of {len(payload)} bytes"
                                  f" exceeds the request plane's max payload of "
                                  f"{self._nc.max_payload} bytes (its header and "
                                  f"parameters: tensors go by the data plane)")
            await self._nc.publish(inbox, payload)
        except BaseException:
            held.free()
            raise
        if held.holding:
            self._held.setdefault(inbox, set()).add(held)
        held.close()

    async def _send_error(self, inbox: str, error: ServerError, model: str) -> None:
        with contextlib.suppress(nats.errors.Error):
            await self._nc.publish(inbox, encode_error(error, model, self.name))


class _Feed:
    """One model's pulls: at most `capacity` of its requests in flight here."""

    def __init__(self, worker: PlaneWorker, model: str, capacity: int) -> None:
        self._worker = worker
        self.model = model
        self.capacity = capacity
        self._inflight: set[asyncio.Task] = set()
        self._room = asyncio.Event()
        self._room.set()
        self._task: asyncio.Task | None = None
        self._sub = None

    async def start(self) -> None:
        await self._subscribe()
        self._task = asyncio.create_task(self._pull(), name=f"pbserve-pull-{self.model}")

    async def _subscribe(self) -> None:
        """The model's shared durable consumer (made if it is not there: first worker,
        or a restarted NATS server that lost it)."""
        self._sub = await self._worker._js.pull_subscribe(
            infer_subject(self.model), durable=token(self.model), stream=STREAM,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S))

    async def stop(self) -> None:
        await cancel_and_wait(self._task)  # its fetch may drop one cancellation
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()

    async def _pull(self) -> None:
        assert self._sub is not None
        while True:
            await self._room.wait()
            try:
                # One at a time: a pull for one message leaves no pull behind on the
                # server once it is answered, and returns as soon as it is (a larger
                # batch waits for all of it, then leaves a pull that may hand this
                # worker a message after it became busy).
                msgs = await self._sub.fetch(1, PULL_S)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                continue
            except nats.errors.Error as err:  # the plane is away, or lost the consumer
                log.warning("'%s': pull failed: %s", self.model, err or type(err).__name__)
                await asyncio.sleep(PULL_S)
                await self._resubscribe()
                continue
            for msg in msgs:  # serve acknowledges it: ours to answer, never redelivered
                task = asyncio.create_task(self._worker.serve(msg))
                self._inflight.add(task)
                task.add_done_callback(self._done)
            if len(self._inflight) >= self.capacity:
                self._room.clear()

    async def _resubscribe(self) -> None:
        """The consumer again (a restarted NATS server lost it with the stream); the
        old subscription is kept if that fails, to fail and be retried again."""
        old = self._sub
        try:
            await self._subscribe()
        except (nats.errors.Error, asyncio.TimeoutError) as err:
            self._sub = old
            log.warning("'%s': not subscribed again yet: %s", self.model,
                        err or type(err).__name__)
            return
        if old is not None:
            with contextlib.suppress(nats.errors.Error):
                await old.unsubscribe()

    def _done(self, task: asyncio.Task) -> None:
        self._inflight.discard(task)
        self._room.set()


async def _ack(msg: Msg) -> None:
    """Acknowledge a pulled request (lost with the plane: it is redelivered then)."""
    with contextlib.suppress(nats.errors.Error):
        await msg.ack()
