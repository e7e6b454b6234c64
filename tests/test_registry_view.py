"""A frontend's view of the model registry (pbserve/distributed/registry.py RegistryView)
keeps following the bucket when its watcher fails: a new watcher replaces it, so the
entries do not all expire with their TTL. The bucket here is a stand-in with the three
calls the view makes; test_distributed.py drives the view on a real NATS server."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from pbserve.distributed import registry
from pbserve.distributed.registry import RegistryView


def _put(model: str, worker: str) -> SimpleNamespace:
    value = json.dumps({"model": model, "worker": worker}).encode()
    return SimpleNamespace(operation="PUT", key=f"{model}.{worker}", value=value)


class _Watcher:
    """Gives its updates in order: an update, None (the initial values' end), or an
    exception to raise; then waits as a quiet bucket does."""

    def __init__(self, updates: list) -> None:
        self._updates = list(updates)
        self.stopped = False

    async def updates(self, timeout: float) -> SimpleNamespace | None:
        if not self._updates:
            await asyncio.sleep(timeout)
            raise registry.nats.errors.TimeoutError
        update = self._updates.pop(0)
        if isinstance(update, Exception):
            raise update
        return update

    async def stop(self) -> None:
        self.stopped = True


class _Bucket:
    def __init__(self, *watchers: _Watcher) -> None:
        self._watchers = list(watchers)
        self.watched = 0

    async def watchall(self) -> _Watcher:
        self.watched += 1
        return self._watchers.pop(0)


async def test_a_failed_watcher_is_replaced_and_the_view_follows_on(monkeypatch):
    monkeypatch.setattr(registry, "FOLLOW_RETRY_S", 0.01)
    first = _Watcher([_put("a", "w1"), None, ConnectionResetError("consumer gone")])
    second = _Watcher([_put("a", "w1"), _put("b", "w2"), None])
    bucket = _Bucket(first, second)
    view = RegistryView(bucket, ttl_s=30)  # type: ignore[arg-type]
    await view.start()
    try:
        for _ in range(200):
            if view.workers == {"w1", "w2"}:
                break
            await asyncio.sleep(0.01)
        assert view.workers == {"w1", "w2"}
        assert bucket.watched == 2 and first.stopped
    finally:
        await view.stop()
