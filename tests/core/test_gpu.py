"""GPU tensors (DLPack with cupy and torch) through real stubs. Skipped, with the reason,
where no CUDA GPU or no GPU framework is present; CI has none, the device machine has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pbserve.core.config.gpus import visible_gpus
from pbserve.testing import load_models

GPU_MODELS = Path(__file__).resolve().parents[1] / "models_gpu"

pytestmark = pytest.mark.skipif(not visible_gpus(), reason="no CUDA GPU on this machine")


def test_a_cupy_output_on_the_gpu_reaches_the_client_as_host_bytes():
    pytest.importorskip("cupy")
    a = np.arange(1 << 20, dtype=np.float32)  # 4 MiB
    with load_models(GPU_MODELS, models=["gpu_scale"]) as models:
        config = models.manager.model_config("gpu_scale")
        assert config["instance_group"][0]["kind"] == "KIND_GPU"
        for _ in range(3):  # the stub's pool blocks are reused: nothing stale
            np.testing.assert_array_equal(models.infer("gpu_scale", {"IN": a})["OUT"], a * 2)


def test_a_gpu_tensor_as_a_bls_input_and_a_bls_output_returned_as_is():
    pytest.importorskip("cupy")
    a = np.linspace(-1, 1, 1000, dtype=np.float32)
    with load_models(GPU_MODELS, models=["gpu_scale", "gpu_bls"]) as models:
        np.testing.assert_array_equal(models.infer("gpu_bls", {"IN": a})["OUT"], (a + 1) * 2)


def test_torch_takes_an_input_by_dlpack_and_answers_on_the_gpu():
    pytest.importorskip("torch")
    a = np.array([[1, 2, 3], [0.5, -1, 4]], dtype=np.float16)
    with load_models(GPU_MODELS, models=["gpu_torch"]) as models:
        config = models.manager.model_config("gpu_torch")
        assert config["instance_group"][0]["gpus"] == visible_gpus()
        np.testing.assert_array_equal(models.infer("gpu_torch", {"IN": a})["OUT"], a * 3)


# -- CUDA IPC between stubs (shm/cuda_region.py, stub/gpu_memory.py) --------------------
@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("memory", ["default", "GPU", "CPU"])
def test_a_gpu_tensor_crosses_a_bls_hop_by_ipc_and_comes_back_bit_exact(framework, memory):
    pytest.importorskip(framework)
    pytest.importorskip("cupy")
    a = np.random.default_rng(7).standard_normal(1 << 18).astype(np.float32)  # 1 MiB
    with load_models(GPU_MODELS, models=["gpu_ipc", "gpu_pass"]) as models:
        for _ in range(3):  # the pool's blocks and the mapped handles are reused
            out = models.infer("gpu_ipc", {"IN": a},
                               parameters={"framework": framework, "memory": memory})
            np.testing.assert_array_equal(out["OUT"], a + 1)
            assert out["CALLEE_SAW_GPU"][0]  # FORCE_CPU_ONLY_INPUT_TENSORS "no"
            assert out["OUT_ON_GPU"][0] == (memory != "CPU")


def test_gpu_inputs_stay_on_the_cpu_by_default_and_host_inputs_on_the_host():
    pytest.importorskip("cupy")
    a = np.arange(100, dtype=np.float32)
    with load_models(GPU_MODELS, models=["gpu_bls", "gpu_scale", "gpu_pass"]) as models:
        # gpu_scale takes CPU inputs (the default): its GPU input arrived on the host
        np.testing.assert_array_equal(models.infer("gpu_bls", {"IN": a})["OUT"], (a + 1) * 2)
        # a client's host bytes stay on the host even with FORCE_CPU_ONLY... "no"
        out = models.infer("gpu_pass", {"IN": a})
        np.testing.assert_array_equal(out["OUT"], a)
        assert not out["ON_GPU"][0]


def test_a_consumer_killed_while_holding_an_ipc_tensor_gives_it_back():
    import os
    import signal

    from polling import wait_for

    pytest.importorskip("cupy")
    hold, probe = {"HOLD": np.array([True])}, {"HOLD": np.array([False])}
    with load_models(GPU_MODELS, models=["gpu_holder", "gpu_producer"]) as models:
        assert models.infer("gpu_holder", hold)["LIVE"][0] == 0
        first = models.infer("gpu_holder", probe)
        assert first["LIVE"][0] == 1  # the held tensor's block is still the consumer's
        os.kill(int(first["PID"][0]), signal.SIGKILL)

        def producer_pool_empty() -> bool:
            try:
                out = models.infer("gpu_holder", probe)
            except Exception:  # noqa: BLE001 - the stub is being restarted
                return False
            return out["LIVE"][0] == 0 and out["PID"][0] != first["PID"][0]

        wait_for(producer_pool_empty, timeout_s=60, what="the killed consumer's block back")
