"""A frontend's view of the model registry (pbserve/distributed/registry.py RegistryView)
keeps following the bucket when its watcher fails: a new watcher replaces it, so the
entries do not all expire with their TTL; a watcher's update older than what the view
read itself is not applied. The bucket here is a stand-in with the three
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


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_lapsed_entries_are_told_from_deleted_ones_and_forgotten_in_time(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(registry, "time", clock)
    view = RegistryView(_Bucket(), ttl_s=3)  # type: ignore[arg-type]
    view._apply(_put("a", "w1"))
    view._apply(_put("b", "w2"))
    view._apply(SimpleNamespace(operation="DEL", key="b.w2", value=b""))  # w2 left
    assert view.lapsed("a") == [] and view.of_model("a")
    clock.now += 4  # w1 killed: no heartbeat within the TTL
    assert view.of_model("a") == [] and [e["worker"] for e in view.lapsed("a")] == ["w1"]
    assert view.lapsed("b") == []  # deleted as its worker left: unknown, not away
    clock.now += registry.GONE_KEEP_S
    assert view.lapsed("a") == []
    view._apply(_put("c", "w3"))  # any update prunes what lapsed long ago
    assert set(view._seen) == {"c.w3"}


def test_instances_name_the_process_behind_a_worker_name():
    view = RegistryView(_Bucket(), ttl_s=3)  # type: ignore[arg-type]
    update = _put("a", "w1")
    update.value = json.dumps({"model": "a", "worker": "w1", "instance": "old"}).encode()
    view._apply(update)
    assert view.instances("w1") == {"old"}
    update.value = json.dumps({"model": "a", "worker": "w1", "instance": "new"}).encode()
    view._apply(update)  # started again under its name: the entry is overwritten
    assert view.instances("w1") == {"new"} and view.instances("w9") == set()


def _revision(model: str, worker: str, state: str, revision: int) -> SimpleNamespace:
    update = _put(model, worker)
    update.value = json.dumps({"model": model, "worker": worker, "state": state}).encode()
    update.revision = revision
    return update


def test_a_watchers_update_older_than_what_refresh_read_is_not_applied():
    """An unload through a frontend reads the worker's entry when the worker answers
    (`refresh`); the watcher's older UNLOADING, coming after, must not undo it."""
    view = RegistryView(_Bucket(), ttl_s=30)  # type: ignore[arg-type]
    view._apply(_revision("a", "w1", "READY", 4))
    view._apply(_revision("a", "w1", "UNAVAILABLE", 6), read=True)  # refresh
    view._apply(_revision("a", "w1", "UNLOADING", 5))  # the watcher, behind
    assert [e["state"] for e in view.of_model("a")] == ["UNAVAILABLE"]
    view._apply(_revision("a", "w1", "READY", 7))  # a later load
    assert [e["state"] for e in view.of_model("a")] == ["READY"]
    view._apply(_revision("a", "w1", "LOADING", 1), read=True)  # the bucket made again
    assert [e["state"] for e in view.of_model("a")] == ["LOADING"]


class _QueueWatcher:
    """Waits for its updates as nats-py's KeyWatcher does: `asyncio.wait_for` on a queue,
    which (before Python 3.12) returns an update that arrives in the same turn of the loop
    as a cancellation, and drops the cancellation."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.queue.put_nowait(None)  # the initial values' end

    async def updates(self, timeout: float) -> SimpleNamespace | None:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise registry.nats.errors.TimeoutError from None

    async def stop(self) -> None:
        pass


async def test_stop_ends_the_view_when_an_update_comes_with_the_cancellation():
    """Issue 40: a frontend and its worker stopped together (Ctrl-C to a process group);
    the worker's deletes reach the view just as the frontend stops it. One cancel was
    dropped by wait_for, the view's loop went on, and stop() waited for good."""
    watcher = _QueueWatcher()
    view = RegistryView(_Bucket(watcher), ttl_s=30)  # type: ignore[arg-type]
    await view.start()
    await asyncio.sleep(0.01)  # the view's task waits in updates()
    watcher.queue.put_nowait(SimpleNamespace(operation="DEL", key="a.w1", value=b""))
    await asyncio.wait_for(view.stop(), 5)  # the update and the cancel in one turn
    assert view._task is None
