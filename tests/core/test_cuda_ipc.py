"""CUDA IPC between processes (shm/cuda_driver.py, shm/cuda_region.py): a pool of device
memory exported by handle, mapped once per allocation in another process, read and
written there. Skipped, with the reason, where there is no CUDA GPU (CI has none)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pbserve.core.config.gpus import visible_gpus
from shm import cuda_driver
from shm.cuda_region import CudaImports, cuda_region_maker, cuda_token, is_cuda_token, \
    parse_cuda_token
from shm.pool import Pool, RegionMap

pytestmark = pytest.mark.skipif(not visible_gpus(), reason="no CUDA GPU on this machine")

# Run in another process: map the block named on the command line, check its bytes,
# write the next pattern into it, and report how long the first and the second map took.
_OTHER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from shm import cuda_driver
    from shm.pool import RegionMap
    token, offset, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    regions = RegionMap()
    start = time.perf_counter()
    device, pointer = regions.cuda.pointer(token, offset, nbytes)
    first = time.perf_counter() - start
    start = time.perf_counter()
    assert regions.cuda.pointer(token, offset, nbytes) == (device, pointer)
    again = time.perf_counter() - start
    seen = np.empty(nbytes, np.uint8)
    cuda_driver.copy(device, seen.ctypes.data, pointer, nbytes)
    assert (seen == np.arange(nbytes, dtype=np.uint8)).all(), seen[:16]
    mine = (np.arange(nbytes, dtype=np.uint8) * 3).astype(np.uint8)
    cuda_driver.copy(device, pointer, mine.ctypes.data, nbytes)
    assert regions.cuda.locate(pointer + 8, 8) == (token, offset + 8)
    regions.close()
    print(f"open {first * 1e6:.0f} us, cached {again * 1e6:.1f} us")
""")


def test_a_pool_block_on_the_gpu_is_read_and_written_by_another_process():
    pool = Pool("pbserve-test-cuda", 1 << 20, 1 << 20, make_region=cuda_region_maker(0))
    try:
        block = pool.alloc(4096)
        assert is_cuda_token(block.region)
        device, size, handle = parse_cuda_token(block.region)
        assert (device, size, len(handle)) == (0, 1 << 20, 64)
        region = pool.region(block.region)
        mine = np.arange(block.nbytes, dtype=np.uint8)
        cuda_driver.copy(0, region.pointer + block.offset, mine.ctypes.data, block.nbytes)
        done = subprocess.run([sys.executable, "-c", _OTHER, block.region, str(block.offset),
                               str(block.nbytes)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        print(done.stdout)
        seen = np.empty(block.nbytes, np.uint8)
        cuda_driver.copy(0, seen.ctypes.data, region.pointer + block.offset, block.nbytes)
        np.testing.assert_array_equal(seen, (mine * 3).astype(np.uint8))
        pool.free(block.region, block.offset)
        again = pool.alloc(4000)  # the freed block comes back: the same allocation
        assert again.region == block.region
    finally:
        pool.close()


def test_a_token_outside_its_allocation_or_malformed_is_refused():
    pool = Pool("pbserve-test-cuda", 1 << 20, 1 << 20, make_region=cuda_region_maker(0))
    try:
        block = pool.alloc(64)
        imports = CudaImports()
        with pytest.raises(ValueError, match="outside"):
            imports.pointer(block.region, (1 << 20) - 32, 64)
        with pytest.raises(ValueError, match="malformed"):
            imports.pointer("cuda:0:64:abcd:x", 0, 8)
        assert len(RegionMap().view(block.region, 0, 8)) == 8  # the parent sees a size
        bogus = cuda_token(0, 1 << 20, bytes(64), "bogus")
        with pytest.raises(cuda_driver.CudaError, match="cuIpcOpenMemHandle"):
            imports.pointer(bogus, 0, 8)
    finally:
        pool.close()


def test_an_allocation_named_by_two_tokens_is_opened_once_and_closed_with_the_last():
    pool = Pool("pbserve-test-cuda", 1 << 20, 1 << 20, make_region=cuda_region_maker(0))
    script = textwrap.dedent("""
        import sys
        from shm.cuda_region import CudaImports, parse_cuda_token, cuda_token
        token = sys.argv[1]
        device, size, handle = parse_cuda_token(token)
        other = cuda_token(device, size, handle, "client7")
        imports = CudaImports()
        a = imports.pointer(token, 0, 8)
        b = imports.pointer(other, 0, 8)
        assert a == b, (a, b)
        imports.drop([token])
        assert imports.pointer(other, 8, 8)[1] == a[1] + 8  # still mapped
        imports.drop_prefix("client")
        assert not imports._opened
        print("ok")
    """)
    try:
        block = pool.alloc(64)
        done = subprocess.run([sys.executable, "-c", script, block.region],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "ok" in done.stdout, done.stderr
    finally:
        pool.close()


def test_a_region_tritonclient_made_is_mapped_by_its_raw_handle():
    cudashm = pytest.importorskip("tritonclient.utils.cuda_shared_memory")
    data = np.arange(1000, dtype=np.float32)
    handle = cudashm.create_shared_memory_region("pbserve-test", data.nbytes, 0)
    try:
        cudashm.set_shared_memory_region(handle, [data])
        raw = cudashm.get_raw_handle(handle)  # base64 of the 64 bytes, as clients send it
        import base64
        token = cuda_token(0, data.nbytes, base64.b64decode(raw), "client1")
        script = textwrap.dedent("""
            import sys
            import numpy as np
            from shm import cuda_driver
            from shm.cuda_region import CudaImports
            device, pointer = CudaImports().pointer(sys.argv[1], 400, 400)
            seen = np.empty(100, np.float32)
            cuda_driver.copy(device, seen.ctypes.data, pointer, 400)
            assert (seen == np.arange(100, 200, dtype=np.float32)).all(), seen
            print("ok")
        """)
        done = subprocess.run([sys.executable, "-c", script, token],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "ok" in done.stdout, done.stderr
    finally:
        cudashm.destroy_shared_memory_region(handle)
