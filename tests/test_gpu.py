"""GPU tensors (DLPack with cupy and torch) through real stubs. Skipped, with the reason,
where no CUDA GPU or no GPU framework is present; CI has none, the device machine has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pbserve.backend.instances.gpus import visible_gpus
from pbserve.testing import load_models

GPU_MODELS = Path(__file__).resolve().parent / "models_gpu"

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
