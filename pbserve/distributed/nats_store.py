"""The JetStream store directory of a nats-server that pbserve starts for tests and for
scripts/cluster.py, which does not outlive its owner.

A store is a private temporary directory (mode 0700). Its owner holds an exclusive
`flock` on the `.owner` file inside it for as long as it lives (the descriptor is not
inherited: the nats-server child does not keep the lock alive). A store whose owner
was killed before it could remove the directory (SIGKILL) has that lock free: the next
store made on the machine removes it. Only directories of this user, with this prefix,
whose lock file can be locked are removed; a symbolic link, another user's directory or
one without a lock file is left alone.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile

PREFIX = "pbserve-test-nats-"
_OWNER = ".owner"


class NatsStore:
    """A store directory (`path`), locked until `close()` or this process's end."""

    def __init__(self) -> None:
        sweep_orphans()
        self.path = tempfile.mkdtemp(prefix=PREFIX)
        # Locked before it takes its name: a sweep never finds an unlocked lock file of a
        # store being made.
        pending = os.path.join(self.path, _OWNER + ".new")
        self._lock = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        os.rename(pending, os.path.join(self.path, _OWNER))

    def close(self) -> None:
        """Remove the directory (the nats-server using it must have stopped)."""
        if self._lock >= 0:
            shutil.rmtree(self.path, ignore_errors=True)
            os.close(self._lock)
            self._lock = -1


def sweep_orphans(directory: str | None = None) -> list[str]:
    """Remove the stores in `directory` (the temporary directory) whose owner is gone;
    their paths."""
    directory = directory or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if entry.name.startswith(PREFIX) and _orphaned(entry):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _orphaned(entry: os.DirEntry) -> bool:
    """This user's store directory whose owner's lock is free."""
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return False
    try:
        fd = os.open(os.path.join(entry.path, _OWNER),
                     os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # no lock file: not a store of ours (or gone meanwhile)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # its owner lives
        return False
    finally:
        os.close(fd)
    return True
