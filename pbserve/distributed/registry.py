"""The model registry: which worker serves which model, in JetStream KV.

A worker puts one entry per model of its repository, key `<model>.<worker>`, value JSON
{"worker", "model", "versions", "state", "reason", "config", "metadata"}; the bucket's
TTL drops an entry its worker stopped refreshing (killed, cut off), and a worker that
exits deletes its own. A frontend reads the whole bucket every `refresh_s`: a worker
whose entries are gone is gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import StorageType
from nats.js.errors import BadRequestError, KeyNotFoundError
from nats.js.kv import KeyValue

from pbserve.distributed.request_plane import token

log = logging.getLogger("pbserve.distributed")

BUCKET = "pbserve_models"
Entry = dict[str, Any]


async def open_bucket(js: JetStreamContext, ttl_s: float) -> KeyValue:
    """The registry bucket, created with `ttl_s` by whichever process comes first."""
    try:
        return await js.create_key_value(bucket=BUCKET, ttl=ttl_s, storage=StorageType.MEMORY)
    except BadRequestError as err:  # there already, with another TTL: use it as it is
        log.debug("registry bucket exists: %s", err)
        return await js.key_value(BUCKET)


class Registry:
    """A worker's entries: put on every heartbeat, deleted on exit."""

    def __init__(self, kv: KeyValue, worker: str) -> None:
        self._kv = kv
        self.worker = worker
        self._models: dict[str, str] = {}  # model -> its key

    def _key(self, model: str) -> str:
        return f"{token(model)}.{token(self.worker)}"

    async def put(self, entry: Entry) -> None:
        key = self._key(entry["model"])
        await self._kv.put(key, json.dumps({**entry, "worker": self.worker}).encode())
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
    """A frontend's copy of the bucket, refreshed in the background."""

    def __init__(self, kv: KeyValue, refresh_s: float) -> None:
        self._kv = kv
        self._refresh_s = refresh_s
        self.entries: list[Entry] = []
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._run(), name="pbserve-registry")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self.refresh()
            except (nats.errors.Error, asyncio.TimeoutError) as err:
                log.warning("registry not read: %s", err)

    async def refresh(self) -> None:
        watcher = await self._kv.watchall(ignore_deletes=True)
        entries = []
        try:
            while (update := await watcher.updates(timeout=5)) is not None:
                if update.value:
                    entries.append(json.loads(update.value))
        except KeyNotFoundError:
            pass
        finally:
            await watcher.stop()
        self.entries = entries

    @property
    def workers(self) -> set[str]:
        return {e["worker"] for e in self.entries}

    def of_model(self, model: str) -> list[Entry]:
        return [e for e in self.entries if e["model"] == model]
