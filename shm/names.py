"""Names of pbserve's shared-memory objects, who owns them, and the sweep of those a dead
owner left.

Every segment and semaphore is named `/pbserve-<pid>-<owner tag>-<token>...`: the prefix
lets a leak check find them, `pbserve-<pid>-<owner tag>` is the key of the process that
owns them (a server; its stubs name theirs under it), and the random token makes names
unguessable.

Ownership is an flock: the owner holds one on its lock file, `/dev/shm/<key>.lock`, from
before its first name until it exits, and the kernel releases it when the owner dies,
however it dies. The sweep at a server's start removes a key's names only when it can take
that lock itself. A pid alone cannot say that: when /dev/shm is shared across pid
namespaces (pods sharing a memory-backed emptyDir, `docker --ipc=host`), a pid dead here
may be a live server there. Names without a lock file (those of an older pbserve, or made
with `new_prefix(pid)` for another process) fall back to that pid test.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import secrets
import threading
from dataclasses import dataclass

import posix_ipc

PREFIX = "pbserve-"
SHM_DIR = "/dev/shm"
LOCK_SUFFIX = ".lock"
_OWNED = re.compile(r"^(?:sem\.)?pbserve-(\d+)-")
_KEY = re.compile(r"^(?:sem\.)?(pbserve-(\d+)-[0-9a-f]{16})(?:-|\.lock$)")


@dataclass(frozen=True)
class _Owner:
    key: str
    pid: int
    fd: int  # of the lock file, held for the process's life; -1: no lock could be had


_owner: _Owner | None = None  # this process's; one per process, so module state
_owner_lock = threading.Lock()


def owner_key() -> str:
    """This process's key, `pbserve-<pid>-<tag>`; the first call takes the lock file."""
    global _owner
    with _owner_lock:
        if _owner is None or _owner.pid != os.getpid():  # first use, or a forked child
            _owner = _take_ownership()
            atexit.register(_give_up_ownership, _owner)
        return _owner.key


def owner_lock_name() -> str | None:
    """The /dev/shm entry of this process's lock file (None before its first name)."""
    owner = _owner
    if owner is None or owner.pid != os.getpid() or owner.fd < 0:
        return None
    return owner.key + LOCK_SUFFIX


def _take_ownership() -> _Owner:
    pid = os.getpid()
    for _ in range(8):
        key = f"{PREFIX}{pid}-{secrets.token_hex(8)}"
        path = os.path.join(SHM_DIR, key + LOCK_SUFFIX)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        except OSError:  # no /dev/shm to write to: names without a lock (the pid test)
            return _Owner(key, pid, -1)
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A sweep may have taken the lock between create and flock, thought us dead and
        # removed the file: then the lock is on a file nobody else can see. Start over.
        if _same_file(fd, path):
            return _Owner(key, pid, fd)
        os.close(fd)
    raise OSError(f"could not take a lock file in {SHM_DIR}")


def _give_up_ownership(owner: _Owner) -> None:
    """At exit (the names are gone by then): remove the lock file, then release it."""
    if owner.pid != os.getpid() or owner.fd < 0:
        return  # a forked child inherits atexit handlers: not its lock
    try:
        os.unlink(os.path.join(SHM_DIR, owner.key + LOCK_SUFFIX))
    except OSError:
        pass
    os.close(owner.fd)


def _same_file(fd: int, path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def new_prefix(owner_pid: int | None = None) -> str:
    """A fresh name prefix owned by this process (or named for `owner_pid`, without a
    lock: the sweep then asks whether that pid lives)."""
    if owner_pid is None or owner_pid == os.getpid():
        key = owner_key()
    else:
        key = f"{PREFIX}{owner_pid}-{secrets.token_hex(8)}"
    return f"/{key}-{secrets.token_hex(8)}"


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


def unlink_owned() -> int:
    """Unlink every name under this process's key (its stubs' too), then its lock file:
    for a process about to end without its usual teardown (pbserve's forced exit, whose
    stubs are killed first). How many names went."""
    owner = _owner
    if owner is None or owner.pid != os.getpid():
        return 0
    count = unlink_prefix(owner.key + "-")
    _give_up_ownership(owner)
    return count


def sweep_dead_owners() -> list[str]:
    """Unlink pbserve entries whose owner is gone (a killed server's leftovers); never
    those of an owner that holds its lock, in whatever pid namespace it runs."""
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    by_key: dict[str, list[str]] = {}
    for name in names:
        match = _KEY.match(name)
        if match:
            by_key.setdefault(match.group(1), []).append(name)
    removed: list[str] = []
    for key, entries in by_key.items():
        lock_name = key + LOCK_SUFFIX
        # Looked up again, not taken from the listing: the owner makes its lock file
        # before its first name, so a name listed means the file exists if it lives.
        if os.path.exists(os.path.join(SHM_DIR, lock_name)):
            removed += _sweep_locked(key, lock_name)
        elif not process_alive(int(key.split("-")[1])):
            removed += [name for name in entries if unlink_entry(name)]
    return removed


def _sweep_locked(key: str, lock_name: str) -> list[str]:
    """Remove `key`'s names and lock file if its lock is free (its owner is dead)."""
    path = os.path.join(SHM_DIR, lock_name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:  # gone meanwhile (its owner exited), or another user's
        return []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: the owner lives (here or in another pid namespace)
            return []
        if not _same_file(fd, path):
            return []  # another sweep removed it first
        removed = [name for name in entries_with_prefix(key + "-") if unlink_entry(name)]
        os.unlink(path)  # last: while names remain, the lock file says whose they are
        return removed + [lock_name]
    finally:
        os.close(fd)
