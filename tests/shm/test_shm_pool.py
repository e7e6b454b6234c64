"""shm.pool: size classes, free lists, growth, limits, threads; RegionMap from a second process."""

from __future__ import annotations

import os
import random
import threading
from itertools import pairwise

import pytest

from shm.names import SHM_DIR, entries_with_prefix
from shm.pool import Block, Pool, RegionMap, ShmExhausted, size_class

from child_process import run_py

KIB = 1024


@pytest.fixture
def make_pool(prefix):
    pools: list[Pool] = []

    def make(**kwargs) -> Pool:
        pool = Pool(f"{prefix}-{len(pools)}", **kwargs)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


@pytest.mark.parametrize(("nbytes", "cls"), [
    (0, 64), (1, 64), (64, 64), (65, 128), (128, 128), (129, 256), (1000, 1024),
    (4096, 4096), (4097, 8192), (256 * KIB - 1, 256 * KIB), (256 * KIB, 256 * KIB),
    (256 * KIB + 1, 320 * KIB), (320 * KIB, 320 * KIB), (320 * KIB + 1, 384 * KIB),
    (64 * 1024 * KIB, 64 * 1024 * KIB),
])
def test_size_class(nbytes, cls):
    assert size_class(nbytes) == cls
    assert size_class(nbytes) >= nbytes


def test_blocks_are_distinct_aligned_and_sized_as_asked(make_pool):
    pool = make_pool(default_size=1024 * KIB)
    blocks = [pool.alloc(n) for n in (1, 64, 65, 300, 5000, 100)]
    assert [b.nbytes for b in blocks] == [1, 64, 65, 300, 5000, 100]
    spans = sorted((b.offset, b.offset + size_class(b.nbytes)) for b in blocks)
    for (_, end), (start, _) in pairwise(spans):
        assert end <= start
    assert all(b.offset % 64 == 0 for b in blocks)
    assert pool.live_blocks == len(blocks)
    for block in blocks:
        assert len(pool.view(block)) == block.nbytes


def test_freed_block_is_reused_at_the_same_offset_for_the_same_class(make_pool):
    pool = make_pool(default_size=1024 * KIB)
    first = pool.alloc(100)
    pool.view(first)[:4] = b"keep"
    pool.free(first.region, first.offset)
    assert pool.live_blocks == 0
    other_class = pool.alloc(1000)  # different class: not the freed block
    assert other_class.offset != first.offset
    again = pool.alloc(120)  # same class (128) as the freed block
    assert (again.region, again.offset) == (first.region, first.offset)
    assert again.nbytes == 120
    assert bytes(pool.view(again)[:4]) == b"keep"  # same memory, not zeroed
    # The free list is per class and LIFO: several freed blocks all come back.
    blocks = [pool.alloc(200) for _ in range(4)]
    for block in blocks:
        pool.free(block.region, block.offset)
    back = {(b.region, b.offset) for b in (pool.alloc(256) for _ in range(4))}
    assert back == {(b.region, b.offset) for b in blocks}
    assert pool.total_bytes == 1024 * KIB


def test_growth_adds_a_region_when_full(make_pool):
    pool = make_pool(default_size=64 * KIB, growth_size=128 * KIB)
    a = pool.alloc(32 * KIB)
    b = pool.alloc(32 * KIB)
    assert a.region == b.region == f"{pool.prefix}-p0"
    assert pool.total_bytes == 64 * KIB
    c = pool.alloc(32 * KIB)  # p0 is full
    assert c.region == f"{pool.prefix}-p1" and c.offset == 0
    assert pool.total_bytes == 192 * KIB
    big = pool.alloc(1024 * KIB)  # larger than the growth step: a region its size
    assert big.region == f"{pool.prefix}-p2" and big.offset == 0
    assert pool.region(big.region).size == 1024 * KIB
    for block in (a, b, c, big):
        path = os.path.join(SHM_DIR, block.region.lstrip("/"))
        assert os.path.exists(path)
    pool.view(big)[-3:] = b"end"
    assert bytes(pool.region(big.region).map[1024 * KIB - 3:]) == b"end"


def test_max_bytes_exhaustion_names_the_limit_and_the_pool_stays_usable(make_pool):
    pool = make_pool(default_size=64 * KIB, growth_size=64 * KIB, max_bytes=128 * KIB)
    a = pool.alloc(64 * KIB)
    b = pool.alloc(64 * KIB)
    with pytest.raises(ShmExhausted) as info:
        pool.alloc(64 * KIB)
    message = str(info.value)
    assert str(128 * KIB) in message and "limit" in message
    assert pool.prefix in message
    assert pool.total_bytes == 128 * KIB
    assert len(entries_with_prefix(pool.prefix)) == 2  # no third region was made
    pool.free(a.region, a.offset)
    c = pool.alloc(64 * KIB)
    assert (c.region, c.offset) == (a.region, a.offset)
    pool.free(b.region, b.offset)
    pool.free(c.region, c.offset)


def test_first_region_larger_than_the_limit_is_exhausted(make_pool):
    pool = make_pool(default_size=64 * KIB, max_bytes=32 * KIB)
    with pytest.raises(ShmExhausted, match=str(32 * KIB)):
        pool.alloc(1)
    assert entries_with_prefix(pool.prefix) == []


def test_double_free_and_unknown_block_are_value_errors(make_pool):
    pool = make_pool(default_size=64 * KIB)
    block = pool.alloc(10)
    pool.free(block.region, block.offset)
    with pytest.raises(ValueError, match="not allocated"):
        pool.free(block.region, block.offset)
    with pytest.raises(ValueError):
        pool.free(block.region, block.offset + 64)
    with pytest.raises(ValueError):
        pool.free("/no-such-region", 0)
    # The failed frees did not corrupt the free list: one reuse, then fresh memory.
    again = pool.alloc(10)
    fresh = pool.alloc(10)
    assert again.offset == block.offset and fresh.offset != block.offset


def test_concurrent_threads_get_non_overlapping_blocks(make_pool):
    pool = make_pool(default_size=256 * KIB, growth_size=256 * KIB)
    nthreads, rounds = 8, 300
    barrier = threading.Barrier(nthreads)
    kept: list[list[Block]] = [[] for _ in range(nthreads)]
    errors: list[BaseException] = []

    def work(tid: int) -> None:
        try:
            rng = random.Random(tid)
            mine: list[Block] = []
            barrier.wait(timeout=10)
            for _ in range(rounds):
                block = pool.alloc(rng.choice((1, 50, 100, 700, 3000, 20000)))
                pool.view(block)[:] = bytes([tid + 1]) * block.nbytes
                mine.append(block)
                if rng.random() < 0.4:
                    victim = mine.pop(rng.randrange(len(mine)))
                    assert bytes(pool.view(victim)) == bytes([tid + 1]) * victim.nbytes
                    pool.free(victim.region, victim.offset)
            kept[tid] = mine
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    live = [(tid, b) for tid, blocks in enumerate(kept) for b in blocks]
    assert pool.live_blocks == len(live)
    by_region: dict[str, list[tuple[int, int]]] = {}
    for tid, block in live:
        # Nobody else wrote into this block.
        assert bytes(pool.view(block)) == bytes([tid + 1]) * block.nbytes
        by_region.setdefault(block.region, []).append(
            (block.offset, block.offset + size_class(block.nbytes)))
    assert len(by_region) > 1  # the pool grew while threads raced
    for region, spans in by_region.items():
        spans.sort()
        assert spans[-1][1] <= pool.region(region).size
        for (_, end), (start, _) in pairwise(spans):
            assert end <= start, f"overlapping blocks in {region}"


def test_close_unlinks_every_region(make_pool):
    pool = make_pool(default_size=64 * KIB, growth_size=64 * KIB)
    blocks = [pool.alloc(48 * KIB) for _ in range(4)]
    names = {b.region for b in blocks}
    assert len(names) == 4
    assert sorted(entries_with_prefix(pool.prefix)) == sorted(n.lstrip("/") for n in names)
    view = pool.view(blocks[0])  # a live view does not make close fail
    pool.close()
    assert entries_with_prefix(pool.prefix) == []
    assert pool.total_bytes == 0 and pool.live_blocks == 0
    del view


CHILD_READER = r"""
import sys
from shm.pool import RegionMap
region, offset, nbytes, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
regions = RegionMap()
view = regions.view(region, offset, nbytes)
assert bytes(view) == bytes(range(256)) * (nbytes // 256), "child sees other bytes"
view[:6] = b"answer"  # handed back through the same memory
assert regions.view(region, offset, 6) is not None  # cached mapping
ok = []
for bad_offset, bad_nbytes in ((size - 10, 20), (size, 1), (-64, 64), (-128, 64), (0, -1),
                               (0, size + 1)):
    try:
        regions.view(region, bad_offset, bad_nbytes)
    except ValueError:
        ok.append("rejected")
    else:
        ok.append(f"accepted {bad_offset}+{bad_nbytes}")
assert len(regions.view(region, size - 10, 10)) == 10  # the very end is fine
del view
regions.close()
print(" ".join(ok))
"""


def test_region_map_sees_the_owners_bytes_from_another_process(make_pool):
    pool = make_pool(default_size=64 * KIB)
    pool.alloc(1000)  # so the block is not at offset 0
    block = pool.alloc(4096)
    pool.view(block)[:] = bytes(range(256)) * 16
    size = pool.region(block.region).size
    out = run_py(CHILD_READER, block.region, block.offset, block.nbytes, size)
    assert out.split() == ["rejected"] * 6
    assert bytes(pool.view(block)[:6]) == b"answer"


def test_region_map_rejects_out_of_range_blocks_and_forgets_by_prefix(make_pool):
    owner = make_pool(default_size=64 * KIB)
    block = owner.alloc(100)
    regions = RegionMap()
    try:
        assert len(regions.view(block.region, block.offset, 100)) == 100
        with pytest.raises(ValueError, match="outside"):
            regions.view(block.region, 64 * KIB - 50, 100)
        with pytest.raises(ValueError):
            regions.view(block.region, -100, 50)
        regions.forget(owner.prefix)
        assert regions._regions == {}
        owner.view(block)[:2] = b"hi"
        assert bytes(regions.view(block.region, block.offset, 2)) == b"hi"  # re-attached
    finally:
        regions.close()


def test_a_block_larger_than_the_growth_step_leaves_the_current_region_serving(make_pool):
    pool = make_pool(default_size=64 * KIB, growth_size=64 * KIB)
    small = pool.alloc(1 * KIB)
    big = pool.alloc(512 * KIB)
    after = pool.alloc(1 * KIB)
    assert big.region != small.region and pool.region(big.region).size == 512 * KIB
    assert after.region == small.region and after.offset == small.offset + KIB


def test_trim_gives_back_regions_idle_since_the_last_trim_and_keeps_the_current(make_pool):
    pool = make_pool(default_size=64 * KIB, growth_size=64 * KIB)
    small = pool.alloc(1 * KIB)
    big = pool.alloc(512 * KIB)
    pool.free(big.region, big.offset)
    assert pool.trim() == []  # allocated from since the previous trim: kept
    assert pool.trim() == [big.region]
    assert pool.total_bytes == 64 * KIB
    assert not os.path.exists(os.path.join(SHM_DIR, big.region.lstrip("/")))
    pool.free(small.region, small.offset)
    pool.trim()
    assert pool.trim() == [] and pool.total_bytes == 64 * KIB  # the current region stays
    again = pool.alloc(512 * KIB)  # a new name: another process's cached mapping of the
    assert again.region != big.region  # old region never stands for it


def test_trim_keeps_regions_with_live_blocks_and_force_gives_back_every_empty_one(make_pool):
    pool = make_pool(default_size=64 * KIB, growth_size=64 * KIB)
    small = pool.alloc(1 * KIB)
    held = pool.alloc(512 * KIB)
    freed = pool.alloc(512 * KIB)
    pool.free(freed.region, freed.offset)
    pool.free(small.region, small.offset)
    assert sorted(pool.trim(force=True)) == sorted([small.region, freed.region])
    assert pool.total_bytes == 512 * KIB
    assert pool.view(held).nbytes == 512 * KIB
    block = pool.alloc(512 * KIB)  # the free list lost the trimmed block
    assert block.region not in (freed.region, held.region)


def test_exhaustion_calls_on_pressure_and_retries_while_it_says_so(make_pool):
    calls = []
    pool = make_pool(default_size=64 * KIB, growth_size=64 * KIB, max_bytes=128 * KIB)
    a = pool.alloc(64 * KIB)
    pool.alloc(64 * KIB)

    def relieve(attempt: int) -> bool:
        calls.append(attempt)
        if attempt == 2:  # memory comes back only at the second try
            pool.free(a.region, a.offset)
            pool.trim(force=True)
        return True

    pool.on_pressure = relieve
    assert pool.alloc(64 * KIB).nbytes == 64 * KIB
    assert calls == [1, 2]
    calls.clear()
    pool.on_pressure = lambda attempt: calls.append(attempt) or attempt < 3
    with pytest.raises(ShmExhausted):
        pool.alloc(64 * KIB)
    assert calls == [1, 2, 3]


def test_has_spare_says_whether_a_trim_may_yet_give_a_region_back(make_pool):
    """What an idle stub asks before it sleeps without a timeout (stub/stub.py)."""
    pool = make_pool(default_size=64 * KIB, growth_size=128 * KIB)
    assert not pool.has_spare()  # nothing, or only the first region: nothing to give
    a = pool.alloc(32 * KIB)
    assert not pool.has_spare()
    b = pool.alloc(64 * KIB)  # p0 is full: a second region
    assert pool.has_spare()
    pool.free(b.region, b.offset)
    pool.free(a.region, a.offset)
    for _ in range(3):  # a region used since the previous trim is kept by the next
        pool.trim()
    assert not pool.has_spare()
    assert pool.total_bytes <= 64 * KIB


def test_prepare_makes_the_first_region_ahead_and_the_first_blocks_come_from_it(make_pool):
    """What a stub does before READY (stub/stub.py `_warm_up`): the first region made,
    once; an idle stub still has nothing to trim, and a trim keeps it."""
    pool = make_pool(default_size=64 * KIB, growth_size=128 * KIB)
    name = pool.prepare()
    assert pool.total_bytes == 64 * KIB
    assert pool.view(Block(name, 0, 4 * KIB)).tobytes() == bytes(4 * KIB)
    assert pool.prepare() == name and pool.total_bytes == 64 * KIB
    assert not pool.has_spare()
    block = pool.alloc(100)
    assert (block.region, block.offset) == (name, 0)
    pool.free(block.region, block.offset)
    for _ in range(3):
        assert pool.trim() == []
