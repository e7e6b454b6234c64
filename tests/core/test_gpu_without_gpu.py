"""The parts of the GPU paths that need no GPU: CUDA tokens, the parent's size-only view
of GPU memory, a stub's record of its own and lent blocks, and the checks made before
any driver call. The GPU itself is tested in test_gpu.py, test_cuda_ipc.py and
test_cuda_shared_memory.py (skipped without one)."""

from __future__ import annotations

import pytest

from pbserve.core.config.config_sources import parse_cuda_pool_sizes
from pbserve.core.memory.shared_memory import SharedMemoryManager
from pbserve.errors import ServerError
from shm.cuda_region import CudaImports, DeviceBytes, cuda_token, is_client_cuda_token, \
    is_cuda_token, parse_cuda_token
from shm.pool import Block, RegionMap
from stub.gpu_memory import GpuMemory

HANDLE = bytes(range(64))  # NUL bytes and all


def test_a_token_carries_device_size_and_the_whole_handle():
    token = cuda_token(1, 4096, HANDLE, "pbserve-x-s-g1-p0")
    assert is_cuda_token(token) and not is_client_cuda_token(token)
    assert parse_cuda_token(token) == (1, 4096, HANDLE)
    assert is_client_cuda_token(cuda_token(0, 8, HANDLE, "client3"))
    for bad in ("cuda:0:64:abcd:x", "cuda:x:64:" + HANDLE.hex() + ":t", "cuda:0:64"):
        with pytest.raises(ValueError, match="malformed CUDA region token"):
            parse_cuda_token(bad)


def test_a_block_outside_its_allocation_is_refused_before_anything_is_opened():
    imports = CudaImports()
    with pytest.raises(ValueError, match="outside its region of 4096 bytes"):
        imports.pointer(cuda_token(0, 4096, HANDLE, "t"), 4000, 100)
    assert not imports._opened


def test_the_parent_sees_only_the_size_of_gpu_memory():
    view = RegionMap().view(cuda_token(0, 4096, HANDLE, "t"), 64, 128)
    assert isinstance(view, DeviceBytes) and len(view) == 128


def test_a_stub_tells_its_own_blocks_from_lent_ones():
    gpu = GpuMemory("pbserve-1-a-s", RegionMap())
    own = cuda_token(0, 1 << 26, HANDLE, "pbserve-1-a-s-g0-p3")
    foreign = cuda_token(0, 1 << 26, HANDLE, "pbserve-1-a-s1-g0-p3")  # a longer prefix
    assert gpu.is_own(own) and not gpu.is_own(foreign)
    assert gpu.free(foreign, 0) is False  # an input lent back as it came: not ours
    key = gpu.lend_input(0x7000, 256, ("IN", "FP32", (64,), foreign, 512, 256))
    assert gpu._lent[key] == Block(foreign, 512, 256)
    gpu.unlend(key)
    assert not gpu._lent and gpu.live_blocks() == 0


def test_cuda_pool_sizes_per_gpu():
    assert parse_cuda_pool_sizes(["0:1024", "1:2048", "0:4096"]) == ((0, 4096), (1, 2048))
    for bad in ("64M", "0:", ":5", "0:0", "a:1"):
        with pytest.raises(ServerError, match="option format is"):
            parse_cuda_pool_sizes([bad])


def test_a_cuda_registration_is_checked_before_the_driver_is_asked():
    manager = SharedMemoryManager(RegionMap(), lambda token: None, gpus=lambda: [0])
    with pytest.raises(ServerError, match="invalid device id 3"):
        manager.register_cuda("r", HANDLE, 3, 64)
    with pytest.raises(ServerError, match="the raw handle has 10 bytes"):
        manager.register_cuda("r", b"0123456789", 0, 64)
    with pytest.raises(ServerError, match="Unable to find cuda shared memory region: 'r'"):
        manager.cuda_status("r")
    assert manager.cuda_status() == [] and manager.status() == []


def test_force_cpu_only_input_tensors_takes_yes_or_no(tmp_path):
    from pbserve.testing import load_models

    model = tmp_path / "picky" / "1"
    model.mkdir(parents=True)
    (model / "model.py").write_text(
        "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n")
    (tmp_path / "picky" / "config.pbtxt").write_text(
        'backend: "python"\ninput [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value { string_value: "maybe" } }\n')
    with load_models(tmp_path) as models:
        [entry] = models.manager.repository_index()
    assert entry["state"] == "UNAVAILABLE"
    assert "Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: maybe'" in entry["reason"]


def test_gpu_outputs_are_not_kept_by_the_response_cache():
    from pbserve.core.cache.response_cache import ResponseCache
    from pbserve.core.types import InferResponse, TensorData

    cache = ResponseCache(1 << 20)
    on_gpu = InferResponse("m", "1", outputs=[TensorData("OUT", "FP32", (4,), DeviceBytes(16))])
    assert cache.insert(("k",), on_gpu) is False
    on_host = InferResponse("m", "1", outputs=[TensorData("OUT", "FP32", (4,), bytes(16))])
    assert cache.insert(("k",), on_host) is True


def test_a_stub_gives_idle_gpu_allocations_back_only_every_trim_interval(monkeypatch):
    """The allocator is the shm pool's (tested there); here host regions stand in for
    device ones: the point is how often the stub's idle trims reach its pools."""
    import stub.gpu_memory as gpu_memory
    from shm.names import new_prefix, unlink_prefix
    from shm.pool import Pool

    clock = [1000.0]
    monkeypatch.setattr(gpu_memory.time, "monotonic", lambda: clock[0])
    prefix = new_prefix()
    gpu = GpuMemory(prefix, RegionMap())
    pool = gpu._pools[0] = Pool(f"{prefix}-g0", 1 << 16, 1 << 16)
    try:
        big = pool.alloc(1 << 20)  # a region of its own, freed at once
        pool.free(big.region, big.offset)
        for _ in range(5):  # idle trims within the interval: nothing goes
            clock[0] += 1
            assert gpu.trim(False) == []
        clock[0] += gpu_memory.TRIM_EVERY_S
        assert gpu.trim(False) == []  # the first trim only marks it idle
        clock[0] += gpu_memory.TRIM_EVERY_S
        assert gpu.trim(False) == [big.region]
        assert gpu.trim(True) == []  # under pressure: at once, whatever is empty
    finally:
        gpu.close()
        unlink_prefix(prefix)
