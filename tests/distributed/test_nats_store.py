"""pbserve/distributed/nats_store.py: a nats-server's store directory does not outlive
its owner, even one killed with SIGKILL, and nothing else in the directory is touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from pbserve.distributed import nats_store
from pbserve.distributed.nats_store import NatsStore

OWNER = textwrap.dedent("""
    import sys, tempfile
    tempfile.tempdir = sys.argv[1]
    from pbserve.distributed.nats_store import NatsStore
    store = NatsStore()
    open(store.path + "/data", "w").write("x")
    print(store.path, flush=True)
    sys.stdin.read()  # until killed
""")


def _owner(directory) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(directory)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def test_a_killed_owners_store_is_removed_and_a_live_ones_kept(tmp_path):
    dead, dead_path = _owner(tmp_path)
    alive, alive_path = _owner(tmp_path)
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait(10)
        assert nats_store.sweep_orphans(str(tmp_path)) == [dead_path]
        assert not os.path.exists(dead_path)
        assert os.path.exists(os.path.join(alive_path, "data"))  # its owner lives
    finally:
        alive.kill()
        alive.wait(10)
    assert nats_store.sweep_orphans(str(tmp_path)) == [alive_path]
    assert list(tmp_path.iterdir()) == []


def test_close_removes_it_and_only_stores_are_swept(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    store = NatsStore()
    assert os.stat(store.path).st_mode & 0o777 == 0o700
    store.close()
    assert not os.path.exists(store.path)
    # Named like a store but not one: no lock file, a link, a plain file. Left alone.
    (tmp_path / f"{nats_store.PREFIX}nolock").mkdir()
    target = tmp_path / "elsewhere"
    (target / ".owner").parent.mkdir()
    (target / ".owner").write_text("")
    os.symlink(target, tmp_path / f"{nats_store.PREFIX}link")
    (tmp_path / f"{nats_store.PREFIX}file").write_text("")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert NatsStore().close() is None  # a new store sweeps, and finds nothing to remove
    assert sorted(p.name for p in tmp_path.iterdir()) == before
