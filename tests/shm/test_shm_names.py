"""shm.names: the name scheme, unlink by prefix, and the sweep of a dead owner's entries."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys

import posix_ipc
import pytest

from shm.names import (
    LOCK_SUFFIX,
    SHM_DIR,
    entries_with_prefix,
    new_prefix,
    owner_lock_name,
    owner_of,
    sweep_dead_owners,
    unlink_entry,
    unlink_prefix,
)
from shm.queue import MessageQueue
from shm.region import Region


def dead_pid() -> int:
    """The pid of a child that has exited and been reaped (so no process has it)."""
    for _ in range(20):
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait(timeout=30)
        try:
            os.kill(child.pid, 0)
        except ProcessLookupError:
            return child.pid
    pytest.fail("could not find a dead pid")


@pytest.fixture
def made():
    """Prefixes used by a test; everything named with them is unlinked at teardown."""
    prefixes: list[str] = []
    closers: list = []
    yield prefixes, closers
    for close in closers:
        close()
    for prefix in prefixes:
        unlink_prefix(prefix)
        assert entries_with_prefix(prefix) == []


def populate(prefix: str, closers: list) -> set[str]:
    """A segment, a queue (segment + two semaphores) and a bare semaphore under `prefix`."""
    region = Region.create(prefix + "-r", 4096)
    queue = MessageQueue.create(prefix + "-q", 1024)
    sem = posix_ipc.Semaphore(prefix + "-s", posix_ipc.O_CREX, 0o600, 0)
    closers.extend([region.close, queue.close, sem.close])
    bare = prefix.lstrip("/")
    return {f"{bare}-r", f"{bare}-q", f"sem.{bare}-q-e", f"sem.{bare}-q-i", f"sem.{bare}-s"}


def test_new_prefix_names_the_owner_and_is_unique():
    prefix = new_prefix()
    assert re.fullmatch(rf"/pbserve-{os.getpid()}-[0-9a-f]{{16}}-[0-9a-f]{{16}}", prefix)
    assert new_prefix() != prefix
    assert new_prefix(4242).startswith("/pbserve-4242-")


def test_the_owner_holds_a_lock_file_named_by_its_key():
    prefix = new_prefix()
    key = prefix.lstrip("/").rsplit("-", 1)[0]
    lock = os.path.join(SHM_DIR, key + LOCK_SUFFIX)
    assert owner_lock_name() == key + LOCK_SUFFIX and os.path.exists(lock)
    assert os.stat(lock).st_mode & 0o777 == 0o600
    fd = os.open(lock, os.O_RDWR)  # a second open file: the lock conflicts even here
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_owner_of():
    assert owner_of("pbserve-123-abcd-p0") == 123
    assert owner_of("sem.pbserve-77-abcd-m-e") == 77
    assert owner_of("pbserve-x-abcd") is None
    assert owner_of("other-123-abcd") is None
    assert owner_of("sem.other") is None
    assert owner_of(new_prefix(99).lstrip("/") + "-p0") == 99


def test_entries_and_unlink_prefix(made):
    prefixes, closers = made
    mine, other = new_prefix(), new_prefix()
    prefixes.extend([mine, other])
    names = populate(mine, closers)
    others = populate(other, closers)
    assert set(entries_with_prefix(mine)) == names
    assert set(entries_with_prefix(mine.lstrip("/"))) == names  # with or without "/"
    assert unlink_prefix(mine) == len(names)
    assert entries_with_prefix(mine) == []
    for name in names:
        assert not os.path.exists(os.path.join(SHM_DIR, name))
    assert set(entries_with_prefix(other)) == others  # another prefix is untouched
    assert unlink_prefix(mine) == 0  # nothing left to remove


def test_unlink_entry_handles_segments_and_semaphores(made):
    prefixes, closers = made
    prefix = new_prefix()
    prefixes.append(prefix)
    names = populate(prefix, closers)
    for name in sorted(names):
        assert unlink_entry(name) is True
        assert unlink_entry(name) is False  # already gone
    assert entries_with_prefix(prefix) == []


def test_sweep_removes_a_dead_owners_entries_and_keeps_live_ones(made):
    prefixes, closers = made
    live = new_prefix()
    prefixes.append(live)
    live_names = populate(live, closers)
    pid = dead_pid()
    dead = new_prefix(pid)
    prefixes.append(dead)
    dead_names = populate(dead, closers)
    # A live owner other than this process: a running child.
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        other_live = new_prefix(child.pid)
        prefixes.append(other_live)
        other_names = populate(other_live, closers)
        assert set(entries_with_prefix(dead)) == dead_names

        removed = sweep_dead_owners()

        # (Not `dead_names <= removed`: a server started by a concurrent test sweeps too.)
        assert entries_with_prefix(dead) == []
        for name in removed:  # the sweep only touched entries of dead owners
            owner = owner_of(name)
            assert owner is not None and owner not in (os.getpid(), child.pid)
        assert set(entries_with_prefix(live)) == live_names
        assert set(entries_with_prefix(other_live)) == other_names
    finally:
        child.communicate(input=b"", timeout=30)
    # Once that child is gone, its entries are swept too.
    sweep_dead_owners()
    assert entries_with_prefix(other_live) == []
    assert set(entries_with_prefix(live)) == live_names
