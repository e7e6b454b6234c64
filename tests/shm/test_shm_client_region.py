"""A client's window (shm/client_region.py): only the window is mapped, from the page
that holds its start; tokens name it across processes; bad windows are refused."""

from __future__ import annotations

import mmap

import posix_ipc
import pytest

from child_process import run_py
from shm.client_region import ClientRegionError, ClientWindow, client_token
from shm.pool import RegionMap

PAGE = mmap.ALLOCATIONGRANULARITY


@pytest.fixture
def segment(prefix):
    """A 4-page segment holding bytes 0, 1, 2, ... (mod 251); yields its key."""
    key = prefix + "-client"
    created = posix_ipc.SharedMemory(key, posix_ipc.O_CREX, size=4 * PAGE)
    with mmap.mmap(created.fd, 4 * PAGE) as whole:
        whole[:] = bytes(i % 251 for i in range(4 * PAGE))
    created.close_fd()
    yield key


def test_a_window_maps_from_the_page_of_its_start_to_its_end_only(segment):
    window = ClientWindow.open(segment, PAGE + 10, 100)
    try:
        assert len(window.map) == 110  # not the 4 pages of the segment
        assert window.size == 100
        assert bytes(window.view(0, 100)) == bytes(i % 251 for i in range(PAGE + 10,
                                                                          PAGE + 110))
        window.view(5, 1)[0] = 7
    finally:
        window.close()
    again = ClientWindow.open(segment, PAGE + 15, 1)
    assert bytes(again.view(0, 1)) == b"\x07"  # the segment itself was written
    again.close()


@pytest.mark.parametrize(("offset", "size", "reason"), [
    (0, 4 * PAGE + 1, "size"), (3 * PAGE, PAGE + 1, "size"), (0, 0, "map")])
def test_windows_outside_the_segment_or_empty_are_refused(segment, offset, size, reason):
    with pytest.raises(ClientRegionError) as info:
        ClientWindow.open(segment, offset, size)
    assert info.value.reason == reason


def test_a_missing_segment_is_refused():
    with pytest.raises(ClientRegionError) as info:
        ClientWindow.open("/pbserve_test_no_such_segment", 0, 8)
    assert info.value.reason == "open"


def test_another_process_maps_the_window_from_its_token_and_forgets_it(segment):
    token = client_token(3, segment, 2 * PAGE + 1, 16)
    out = run_py(f"""
from shm.pool import RegionMap
regions = RegionMap()
regions.view({token!r}, 0, 16)[:] = bytes(range(100, 116))
regions.forget({token!r})
print(len(regions._regions))
""")
    assert out.strip() == "0"
    regions = RegionMap()
    try:
        assert bytes(regions.view(token, 0, 16)) == bytes(range(100, 116))
        with pytest.raises(ValueError):
            regions.view(token, 8, 9)  # beyond the window, though inside the segment
    finally:
        regions.close()
