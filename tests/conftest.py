"""Suite-wide guard: no pbserve shared memory may be left behind by the tests."""

from __future__ import annotations

import os

import pytest

from shm.names import SHM_DIR, owner_lock_name, owner_of, process_alive


def _pbserve_entries() -> set[str]:
    try:
        return {n for n in os.listdir(SHM_DIR) if "pbserve" in n.lower()}
    except FileNotFoundError:
        return set()


_BEFORE: set[str] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _BEFORE.update(_pbserve_entries())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if an entry appeared that nobody alive owns (or that we own). Under
    pytest-xdist, once every worker is done: in the controller (a worker that ends first
    would count what a test of another still runs with)."""
    if hasattr(session.config, "workerinput"):  # an xdist worker
        return
    me = os.getpid()
    mine = owner_lock_name()  # this process's lock file: removed when it exits
    leaked = sorted(n for n in _pbserve_entries() - _BEFORE - {mine}
                    if (pid := owner_of(n)) is None or pid == me or not process_alive(pid))
    if leaked:
        print(f"\n/dev/shm holds {len(leaked)} pbserve entries the tests left behind:")
        for name in leaked[:20]:
            print("  ", name)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def prefix():
    """A fresh shm name prefix; everything named with it is gone after the test."""
    from shm.names import entries_with_prefix, new_prefix, unlink_prefix

    name = new_prefix()
    yield name
    unlink_prefix(name)
    assert entries_with_prefix(name) == []
