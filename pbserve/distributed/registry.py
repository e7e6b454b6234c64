"""The model registry: which worker serves which model, in JetStream KV.

A worker puts one entry per model of its repository, key `<model>.<worker>`, value JSON
{"worker", "instance", "model", "versions", "state", "reason", "config", "metadata"};
the bucket's TTL drops an entry its worker stopped refreshing (killed, cut off), and a
worker that exits deletes its own. A frontend follows the bucket (RegistryView): a
worker whose entries are gone is gone. `instance` is a token of the worker's process:
a worker started again under the same name (a supervisor's restart, within the TTL)
overwrites the entries of the one that died, and the new token says that the old
process, and whatever it had in flight, is gone. A view remembers entries that lapsed
(not deleted) for GONE_KEEP_S: their model is away, not unknown.

After the NATS server restarts (the bucket is in its memory: gone with it) the plane
makes the bucket again, a worker puts its entries at once (`PlaneWorker.sync`), and a
frontend's view follows a new watcher (`RegistryView.restart`); the entries it saw
before stay until their TTL, so a worker that comes back within it never leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from typing import Any, Callable

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import StorageType
from nats.js.errors import BadRequestError, KeyDeletedError, KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from pbserve.distributed.request_plane import token
from pbserve.task_stop import cancel_and_wait

log = logging.getLogger("pbserve.distributed")

BUCKET = "pbserve_models"
FOLLOW_RETRY_S = 0.5  # a registry view waits this long before replacing a failed watcher
GONE_KEEP_S = 300.0  # how long a view remembers entries that lapsed (no heartbeat)
Entry = dict[str, Any]


async def open_bucket(js: JetStreamContext, ttl_s: float) -> KeyValue:
    """The registry bucket, created with `ttl_s` by whichever process comes first."""
    try:
        return await js.create_key_value(bucket=BUCKET, ttl=ttl_s, storage=StorageType.MEMORY)
    except BadRequestError as err:  # there already, with another TTL: use it as it is
        log.debug("registry bucket exists: %s", err)
        return await js.key_value(BUCKET)


def entry_key(model: str, worker: str) -> str:
    return f"{token(model)}.{token(worker)}"


class Registry:
    """A worker's entries: put on every heartbeat, deleted on exit."""

    def __init__(self, kv: KeyValue, worker: str) -> None:
        self._kv = kv
        self.worker = worker
        self.instance = secrets.token_hex(8)  # this process, among workers of its name
        self._models: dict[str, str] = {}  # model -> its key

    def _key(self, model: str) -> str:
        return entry_key(model, self.worker)

    async def put(self, entry: Entry) -> None:
        key = self._key(entry["model"])
        await self._kv.put(key, json.dumps({**entry, "worker": self.worker,
                                           "instance": self.instance}).encode())
        self._models[entry["model"]] = key

    async def remove(self, model: str) -> None:
        key = self._models.pop(model, None) or self._key(model)
        await self._kv.purge(key)

    def models(self) -> list[str]:
        """The models this worker has entries for."""
        return list(self._models)

    async def remove_all(self) -> None:
        keys, self._models = list(self._models.values()), {}
        for key in keys:
            await self._kv.purge(key)


class RegistryView:
    """A frontend's copy of the bucket, following it with a watcher.

    The bucket's TTL writes no delete marker when it drops an entry, so the view applies
    the TTL itself: an entry not put again within `ttl_s` of the last put it saw (by
    this process's clock) is gone, as it soon is from the bucket.
    """

    def __init__(self, kv: KeyValue, ttl_s: float,
                 on_change: Callable[[str, Entry | None], None] | None = None) -> None:
        """`on_change(key, entry)`: called with each update applied (None: deleted),
        heartbeats included (a frontend's worker_log.py)."""
        self._kv = kv
        self._ttl_s = ttl_s
        self._on_change = on_change
        self._seen: dict[str, tuple[float, Entry]] = {}  # key -> (when put, entry)
        # key -> the newest revision applied: a watcher's update older than what `refresh`
        # read is not applied (the bucket's revisions only grow, until it is made again:
        # a new watcher starts them afresh)
        self._revisions: dict[str, int] = {}
        self._pruned_at = time.monotonic()
        self._watcher = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """Returns once the bucket's current entries are in the view."""
        self._watcher = await self._kv.watchall()
        self._revisions.clear()
        while (update := await self._watcher.updates(timeout=10)) is not None:
            self._apply(update)
        self._task = asyncio.create_task(self._follow(), name="pbserve-registry")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)  # again and again: see task_stop.py
        self._task = None
        if self._watcher is not None:
            with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
                await self._watcher.stop()
            self._watcher = None

    async def restart(self) -> None:
        """Follow the bucket with a new watcher (the old one's consumer was lost with
        the server); what the old one saw stays until its TTL."""
        await self.stop()
        await self.start()

    async def _follow(self) -> None:
        """Apply the bucket's updates as they come. A watcher that fails is replaced
        (after FOLLOW_RETRY_S): the view must not stop following, or every entry in it
        would expire with its TTL and every remote model look gone."""
        while True:
            try:
                if self._watcher is None:
                    self._watcher = await self._kv.watchall()
                    self._revisions.clear()
                update = await self._watcher.updates(timeout=60)
            except nats.errors.TimeoutError:
                continue
            except Exception as err:  # noqa: BLE001 - any failure: a new watcher
                log.warning("registry view: watcher failed (%s): following anew", err)
                failed, self._watcher = self._watcher, None
                if failed is not None:
                    with contextlib.suppress(Exception):
                        await failed.stop()
                await asyncio.sleep(FOLLOW_RETRY_S)
                continue
            if update is not None:
                self._apply(update)

    def _apply(self, update: Any, read: bool = False) -> None:
        """A watcher's update, or what `refresh` read (`read`: the bucket's latest)."""
        revision = getattr(update, "revision", None) or 0
        if not read and revision < self._revisions.get(update.key, 0):
            return  # the watcher is behind what `refresh` read (an unload's UNLOADING
            # after its UNAVAILABLE)
        self._revisions[update.key] = revision
        if update.operation in (KV_DEL, KV_PURGE) or not update.value:
            self._seen.pop(update.key, None)
            if self._on_change is not None:
                self._on_change(update.key, None)
            return
        try:
            self._seen[update.key] = (time.monotonic(), entry := json.loads(update.value))
        except ValueError:
            log.warning("registry entry '%s' is not JSON: ignored", update.key)
        else:
            if self._on_change is not None:
                self._on_change(update.key, entry)
        self._prune()

    def _prune(self) -> None:
        """Forget entries lapsed for over GONE_KEEP_S (checked once a TTL at most): a
        frontend outlives many workers' names (HOST-PID by default)."""
        now = time.monotonic()
        if now - self._pruned_at < self._ttl_s:
            return
        self._pruned_at = now
        for key in [k for k, (when, _) in self._seen.items() if when < now - GONE_KEEP_S]:
            del self._seen[key]
        for key in [k for k in self._revisions if k not in self._seen]:
            del self._revisions[key]

    async def refresh(self, model: str, workers: list[str]) -> None:
        """Read `model`'s entries of `workers` from the bucket now (not waiting for the
        watcher): what a worker put before it answered is seen by the next request."""
        for worker in workers:
            key = entry_key(model, worker)
            try:
                entry = await self._kv.get(key)
            except (KeyNotFoundError, KeyDeletedError):
                self._seen.pop(key, None)
            except nats.errors.Error as err:
                log.warning("registry entry '%s' not read: %s", key, err)
            else:
                self._apply(entry, read=True)

    @property
    def entries(self) -> list[Entry]:
        """The live entries (put within the TTL)."""
        oldest = time.monotonic() - self._ttl_s
        return [entry for when, entry in self._seen.values() if when >= oldest]

    @property
    def workers(self) -> set[str]:
        return {e["worker"] for e in self.entries}

    def instances(self, worker: str) -> set[str]:
        """The process tokens of `worker`'s live entries (one, but for a short while
        after it was started again: its old entries for models it no longer serves)."""
        return {e.get("instance", "") for e in self.entries if e["worker"] == worker}

    def of_model(self, model: str) -> list[Entry]:
        return [e for e in self.entries if e["model"] == model]

    def lapsed(self, model: str) -> list[Entry]:
        """`model`'s entries whose worker stopped refreshing them (killed, cut off, or
        not back yet after the NATS server restarted) within GONE_KEEP_S; not those a
        worker deleted as it left."""
        now = time.monotonic()
        return [e for when, e in self._seen.values() if e["model"] == model
                and now - GONE_KEEP_S <= when < now - self._ttl_s]
