"""What a cloud repository copy (cloud_repository.py) says in the log: what it is about
to download and how much, progress every EVERY_S while it lasts, and when it is done.
A copy with nothing to download (a poll that found no change) says nothing.

    copying 12 files (340.2 MiB) of model repository s3://bucket/models to /tmp/pbserve-...
    copied 5 of 12 files (120.0 of 340.2 MiB) of model repository s3://bucket/models
    copied 12 files (340.2 MiB) of model repository s3://bucket/models in 9.8 s
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("pbserve.core")

EVERY_S = 5.0


def human_size(size: int) -> str:
    """Bytes as `512 B`, `1.5 KiB`, `340.2 MiB`, `1.1 GiB`."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # not reached


class CopyLog:
    """One copy: `file_done(size)` after each file downloaded, `finish()` at the end."""

    def __init__(self, url: str, local: str, files: int, size: int,
                 every_s: float = EVERY_S) -> None:
        self.url = url
        self.files, self.size = files, size
        self.done_files = self.done_size = 0
        self._every_s = every_s
        self._started = self._last = time.monotonic()
        if files:
            log.info("copying %d file%s (%s) of model repository %s to %s", files,
                     "" if files == 1 else "s", human_size(size), url, local)

    def file_done(self, size: int) -> None:
        self.done_files += 1
        self.done_size += size
        now = time.monotonic()
        if now - self._last >= self._every_s and self.done_files < self.files:
            self._last = now
            log.info("copied %d of %d files (%s of %s) of model repository %s",
                     self.done_files, self.files, human_size(self.done_size),
                     human_size(self.size), self.url)

    def finish(self, removed: int = 0) -> None:
        if self.done_files:
            log.info("copied %d file%s (%s) of model repository %s in %.1f s",
                     self.done_files, "" if self.done_files == 1 else "s",
                     human_size(self.done_size), self.url, time.monotonic() - self._started)
        if removed:
            log.info("removed %d file%s no longer in model repository %s", removed,
                     "" if removed == 1 else "s", self.url)
