"""A frontend's log of the workers it sees on the request plane, at INFO:

    worker 'gpu-1' joined the request plane, serving: add_sub (version 1), big (LOADING)
    worker 'gpu-1' now serves: big (versions 1, 2); no longer: add_sub
    worker 'gpu-1' left the request plane (it served: big)
    worker 'gpu-2' is gone: no heartbeat within the registry's TTL (it served: add_sub)

Fed every registry update (RegistryView's `on_change`): each heartbeat costs a dict
lookup and a tuple comparison; what changed is logged DELAY_S later, one line per
worker, so that a worker's entries, which arrive one by one, make one line. Entries that
lapse (no heartbeat within the TTL: no update says so) are noticed by a look every TTL
while any worker is known. Nothing here runs per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

log = logging.getLogger("pbserve.distributed")

DELAY_S = 0.2
READY = "READY"

# an entry as far as the log cares: (worker, model, instance, state, versions)
_Signature = tuple[str, str, str, str, tuple]


class WorkerLog:
    def __init__(self, ttl_s: float, delay_s: float = DELAY_S) -> None:
        self._ttl_s = ttl_s
        self._delay_s = delay_s
        self._seen: dict[str, tuple[_Signature, float]] = {}  # key -> (signature, when)
        self._logged: dict[str, dict[str, str]] = {}  # worker -> {model: as logged}
        self._instances: dict[str, str] = {}  # worker -> its process token, as logged
        self._deleted: set[str] = set()  # workers that deleted an entry since the last line
        self._soon: asyncio.TimerHandle | None = None
        self._tick: asyncio.TimerHandle | None = None

    def changed(self, key: str, entry: Any) -> None:
        """A registry update: `entry` put under `key`, or (None) `key` deleted. Never
        raises: a malformed entry is not logged (the view following the bucket goes on)."""
        try:
            self._changed(key, entry)
        except Exception as err:  # noqa: BLE001 - logging must not stop the view
            log.debug("registry entry '%s' not logged: %s", key, err)

    def _changed(self, key: str, entry: Any) -> None:
        if entry is None:
            gone = self._seen.pop(key, None)
            if gone is not None:
                self._deleted.add(gone[0][0])
                self._schedule()
            return
        now = time.monotonic()
        signature = (str(entry.get("worker", "")), str(entry.get("model", "")),
                     str(entry.get("instance", "")), str(entry.get("state", "")),
                     tuple(map(str, entry.get("versions") or ())))
        old = self._seen.get(key)
        self._seen[key] = (signature, now)
        if old is None or old[0] != signature or now - old[1] > self._ttl_s:
            self._schedule()

    def _schedule(self) -> None:
        if self._soon is None:
            self._soon = asyncio.get_running_loop().call_later(self._delay_s, self._flush)

    def _on_tick(self) -> None:
        self._tick = None
        self._flush()

    def _flush(self) -> None:
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        served, instances, lapsed = self._current()
        for worker in sorted(served.keys() - self._logged.keys()):
            log.info("worker '%s' joined the request plane, serving: %s", worker,
                     _models(served[worker]))
        for worker in sorted(self._logged.keys() - served.keys()):
            had = ", ".join(sorted(self._logged[worker]))
            if worker in lapsed or worker not in self._deleted:
                log.info("worker '%s' is gone: no heartbeat within the registry's TTL "
                         "(it served: %s)", worker, had)
            else:
                log.info("worker '%s' left the request plane (it served: %s)", worker, had)
        for worker in sorted(served.keys() & self._logged.keys()):
            self._log_change(worker, served[worker], instances[worker])
        self._logged, self._instances = served, instances
        self._deleted.clear()
        if self._logged and self._tick is None:
            self._tick = asyncio.get_running_loop().call_later(self._ttl_s, self._on_tick)

    def _current(self) -> tuple[dict[str, dict[str, str]], dict[str, str], set[str]]:
        """Each live worker's models (as logged) and process token; the workers with
        entries that lapsed (forgotten here)."""
        oldest = time.monotonic() - self._ttl_s
        served: dict[str, dict[str, str]] = {}
        newest: dict[str, tuple[float, str]] = {}  # worker -> (when, instance) of its last put
        lapsed: set[str] = set()
        for key, ((worker, model, instance, state, versions), when) in list(
                self._seen.items()):
            if when < oldest:
                del self._seen[key]
                lapsed.add(worker)
                continue
            served.setdefault(worker, {})[model] = _model(state, versions)
            if when >= newest.get(worker, (0.0, ""))[0]:
                newest[worker] = (when, instance)
        return served, {w: i for w, (_, i) in newest.items()}, lapsed

    def _log_change(self, worker: str, now: dict[str, str], instance: str) -> None:
        before = self._logged[worker]
        if instance != self._instances.get(worker):
            log.info("worker '%s' was started again (a new process has its name), "
                     "serving: %s", worker, _models(now))
            return
        changed = {m: d for m, d in now.items() if before.get(m) != d}
        dropped = sorted(before.keys() - now.keys())
        if not changed and not dropped:
            return
        parts = []
        if changed:
            parts.append(f"now serves: {_models(changed)}")
        if dropped:
            parts.append(f"no longer: {', '.join(dropped)}")
        log.info("worker '%s' %s", worker, "; ".join(parts))


def _model(state: str, versions: tuple) -> str:
    if state != READY:
        return state or "UNKNOWN"
    if len(versions) == 1:
        return f"version {versions[0]}"
    return f"versions {', '.join(map(str, versions))}"


def _models(models: dict[str, str]) -> str:
    return ", ".join(f"{name} ({models[name]})" for name in sorted(models))
