"""shm.region: real POSIX segments, attached from a second process."""

from __future__ import annotations

import os
import stat

import posix_ipc
import pytest

from shm.names import SHM_DIR, entries_with_prefix
from shm.region import Region, ShmExhausted

from child_process import run_py



@pytest.fixture
def regions():
    made: list[Region] = []
    yield made
    for region in made:
        region.unlink()
        region.close()


def path_of(name: str) -> str:
    return os.path.join(SHM_DIR, name.lstrip("/"))


def test_create_is_mode_0600_with_the_requested_size(prefix, regions):
    region = Region.create(prefix, 12345)
    regions.append(region)
    info = os.stat(path_of(prefix))
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.getuid()
    assert info.st_size == region.size == 12345
    assert region.owner
    # posix_fallocate reserved the pages: the segment is backed, not sparse.
    assert info.st_blocks * 512 >= 12345


def test_create_refuses_an_existing_name(prefix, regions):
    regions.append(Region.create(prefix, 4096))
    with pytest.raises(posix_ipc.ExistentialError):
        Region.create(prefix, 4096)


CHILD_ATTACH = r"""
import sys
from shm.region import Region
name = sys.argv[1]
region = Region.attach(name)
assert not region.owner
view = region.view(0, region.size)
expected = bytes(i % 251 for i in range(4096))
assert bytes(view[:4096]) == expected, "child does not see the parent's bytes"
view[4096:4096 + 5] = b"child"
print(region.size)
del view
region.close()
"""


def test_attach_from_another_process_sees_the_writes_both_ways(prefix, regions):
    region = Region.create(prefix, 8192)
    regions.append(region)
    view = region.view(0, region.size)
    view[:4096] = bytes(i % 251 for i in range(4096))
    out = run_py(CHILD_ATTACH, prefix)
    assert int(out) == 8192
    # The child's write shows through the parent's existing mapping.
    assert bytes(view[4096:4096 + 5]) == b"child"
    assert bytes(region.map[4096:4096 + 5]) == b"child"
    del view


def test_view_is_a_writable_window_without_copy(prefix, regions):
    region = Region.create(prefix, 4096)
    regions.append(region)
    view = region.view(100, 8)
    assert len(view) == 8 and not view.readonly
    view[:] = b"abcdefgh"
    assert region.map[100:108] == b"abcdefgh"
    region.map[100:101] = b"Z"
    assert bytes(view[:1]) == b"Z"
    del view


def test_unlink_removes_the_name_but_keeps_the_mapping(prefix, regions):
    region = Region.create(prefix, 4096)
    regions.append(region)
    region.map[:4] = b"live"
    assert os.path.exists(path_of(prefix))
    region.unlink()
    assert not os.path.exists(path_of(prefix))
    assert entries_with_prefix(prefix) == []
    with pytest.raises(posix_ipc.ExistentialError):
        Region.attach(prefix)
    assert region.map[:4] == b"live"  # still mapped here
    region.unlink()  # a second unlink is harmless


def test_too_large_a_request_is_shm_exhausted_and_leaves_no_name(prefix):
    fs = os.statvfs(SHM_DIR)
    if fs.f_blocks == 0:
        pytest.skip("/dev/shm has no size limit here")
    # More than the whole file system, not more than its free space: what others use or
    # free meanwhile cannot make it fit, and tmpfs refuses it before taking any page.
    too_big = fs.f_blocks * fs.f_frsize + (1 << 20)
    with pytest.raises(ShmExhausted) as info:
        Region.create(prefix, too_big)
    message = str(info.value)
    assert str(too_big) in message
    assert "/dev/shm" in message
    assert "shm-size" in message  # says how to fix it
    assert message.startswith("Failed to increase the shared memory pool size")  # Triton's
    assert isinstance(info.value, MemoryError)
    assert not os.path.exists(path_of(prefix))
    assert entries_with_prefix(prefix) == []


def test_close_with_live_views_is_not_an_error(prefix, regions):
    region = Region.create(prefix, 4096)
    regions.append(region)
    view = region.view(0, 16)
    view[:5] = b"hello"
    region.close()  # BufferError swallowed: the mapping stays while the view lives
    assert bytes(view[:5]) == b"hello"
    del view
    region.close()  # now it really unmaps
    assert region.map.closed
    region.close()  # and closing again is harmless


def test_owner_close_and_unlink_leave_other_mappings_valid(prefix, regions):
    region = Region.create(prefix, 4096)
    regions.append(region)
    other = Region.attach(prefix)
    try:
        region.map[:3] = b"abc"
        region.close()
        region.unlink()
        assert other.map[:3] == b"abc"
        other.map[:3] = b"xyz"
        assert other.map[:3] == b"xyz"
    finally:
        other.close()
