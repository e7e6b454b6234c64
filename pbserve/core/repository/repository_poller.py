"""`--model-control-mode poll`: the repositories are the truth, checked every N seconds.

A model directory that appears is loaded, one that disappears is unloaded, and one whose
files changed (config.pbtxt, or anything under a version directory: names, sizes and
modification times) is reloaded: the new version loads beside the old one, which keeps
serving until the swap and then finishes its in-flight requests.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Awaitable, Callable

from pbserve.core.repository.repository import scan_repositories

log = logging.getLogger("pbserve.core")


def fingerprint(model_dir: Path) -> tuple:
    """What changes when a model's files change (cheap: stat only, no reading)."""
    entries = []
    for root, dirs, files in os.walk(model_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            entries.append((os.path.relpath(path, model_dir), st.st_size, st.st_mtime_ns))
    return tuple(entries)


class RepositoryPoller:
    def __init__(self, repositories: list[Path], interval_s: float,
                 load: Callable[[str], Awaitable[None]],
                 unload: Callable[[str], Awaitable[None]],
                 loaded: Callable[[], dict[str, tuple]],
                 refresh: Callable[[], Awaitable[None]] | None = None,
                 namespacing: bool = False) -> None:
        """`refresh`: brings the repositories' local copies up to date before each look
        (cloud repositories: cloud_repository.py); `namespacing`: --model-namespacing
        (repository.py)."""
        self._repositories = repositories
        self._refresh = refresh
        self._namespacing = namespacing
        self._interval_s = interval_s
        self._load = load
        self._unload = unload
        self._loaded = loaded  # name -> fingerprint at its last load attempt
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.poll()
            except Exception:  # noqa: BLE001 - a bad poll must not stop the next
                log.exception("polling the model repository failed")

    async def poll(self) -> None:
        if self._refresh is not None:
            await self._refresh()
        scanned = scan_repositories(self._repositories, self._namespacing)
        known = self._loaded()
        work = []
        for name, source in scanned.models.items():
            if name not in known or known[name] != fingerprint(source.path):
                work.append(self._load(name))
        for name in known:
            if name not in scanned.models:
                work.append(self._unload(name))
        results = await asyncio.gather(*work, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                log.debug("poll: %s", result)
