"""Names of pbserve's shared-memory objects, and the sweep of those a dead process left.

Every segment and semaphore is named `/pbserve-<owner pid>-<token>...`: the prefix lets
a leak check find them, the owner pid lets a later start remove what a killed server
left, and the random token makes names unguessable.
"""

from __future__ import annotations

import os
import re
import secrets

import posix_ipc

PREFIX = "pbserve-"
SHM_DIR = "/dev/shm"
_OWNED = re.compile(r"^(?:sem\.)?pbserve-(\d+)-")


def new_prefix(owner_pid: int | None = None) -> str:
    """A fresh name prefix owned by `owner_pid` (default: this process)."""
    pid = os.getpid() if owner_pid is None else owner_pid
    return f"/{PREFIX}{pid}-{secrets.token_hex(8)}"


def owner_of(entry: str) -> int | None:
    """The owner pid encoded in a /dev/shm entry name, or None if not ours."""
    match = _OWNED.match(entry)
    return int(match.group(1)) if match else None


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unlink_entry(entry: str) -> bool:
    """Unlink one /dev/shm entry (segment or `sem.` semaphore); False if already gone."""
    try:
        if entry.startswith("sem."):
            posix_ipc.unlink_semaphore("/" + entry[4:])
        else:
            posix_ipc.unlink_shared_memory("/" + entry)
    except posix_ipc.ExistentialError:
        return False
    return True


def entries_with_prefix(prefix: str) -> list[str]:
    """The /dev/shm entries (segments and semaphores) whose name starts with `prefix`."""
    bare = prefix.lstrip("/")
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    return [n for n in names if n.startswith(bare) or n.startswith("sem." + bare)]


def unlink_prefix(prefix: str) -> int:
    """Unlink everything named with `prefix`; returns how many entries went."""
    return sum(unlink_entry(n) for n in entries_with_prefix(prefix))


def sweep_dead_owners() -> list[str]:
    """Unlink pbserve entries whose owner process is gone (a killed server's leftovers)."""
    removed = []
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return removed
    for name in names:
        pid = owner_of(name)
        if pid is not None and not process_alive(pid) and unlink_entry(name):
            removed.append(name)
    return removed
