"""Triton's CUDA shared memory extension, driven as a user drives it: a real pbserve,
regions made with `tritonclient.utils.cuda_shared_memory`, the tritonclient HTTP and
gRPC clients. A model with FORCE_CPU_ONLY_INPUT_TENSORS "no" reads a client's region as
a GPU tensor; one with CPU inputs gets host bytes; outputs are written into a client's
region on the device. Skipped, with the reason, where there is no CUDA GPU (CI has none;
the refusals without a GPU are in test_system_shared_memory.py)."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from pbserve.core.config.gpus import visible_gpus
from pbserve.testing import running_server

pytestmark = pytest.mark.skipif(not visible_gpus(), reason="no CUDA GPU on this machine")

ROOT = Path(__file__).resolve().parents[2]
GPU_MODELS = ROOT / "tests" / "models_gpu"
EXAMPLES = ROOT / "models" / "examples"


@pytest.fixture(scope="module")
def cudashm():
    return pytest.importorskip("tritonclient.utils.cuda_shared_memory")


@pytest.fixture(scope="module")
def server():
    load = [a for name in ("gpu_pass", "identity") for a in ("--load-model", name)]
    with running_server(GPU_MODELS, EXAMPLES,
                        args=["--model-control-mode", "explicit", *load]) as running:
        yield running


@pytest.fixture(params=["http", "grpc"])
def client(request, server):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    made = server.http_client() if request.param == "http" else server.grpc_client()
    module = httpclient if request.param == "http" else grpcclient
    yield made, module
    made.unregister_cuda_shared_memory()
    made.close()


def _region(cudashm, tag: str, size: int):
    return cudashm.create_shared_memory_region(tag, size, 0)


@pytest.mark.parametrize("model, on_gpu", [("gpu_pass", True), ("identity", False)])
def test_a_client_cuda_region_in_and_out(cudashm, client, model, on_gpu):
    made, module = client
    a = np.random.default_rng(3).standard_normal(4096).astype(np.float32)
    inp = _region(cudashm, "in", a.nbytes)
    out = _region(cudashm, "out", a.nbytes)
    try:
        cudashm.set_shared_memory_region(inp, [a])
        raw_in = cudashm.get_raw_handle(inp)
        raw_out = cudashm.get_raw_handle(out)
        made.register_cuda_shared_memory("in", raw_in, 0, a.nbytes)
        made.register_cuda_shared_memory("out", raw_out, 0, a.nbytes)
        names = {"gpu_pass": ("IN", "OUT"), "identity": ("INPUT_FP32", "OUTPUT_FP32")}
        in_name, out_name = names[model]
        tensor = module.InferInput(in_name, [a.size], np_to_triton_dtype(a.dtype))
        tensor.set_shared_memory("in", a.nbytes)
        wanted = module.InferRequestedOutput(out_name)
        wanted.set_shared_memory("out", a.nbytes)
        outputs = [wanted]
        if model == "gpu_pass":
            outputs.append(module.InferRequestedOutput("ON_GPU"))
        result = made.infer(model, [tensor], outputs=outputs)
        if model == "gpu_pass":
            assert bool(result.as_numpy("ON_GPU")[0]) is on_gpu
        assert result.get_output(out_name) is not None  # named, its bytes in the region
        got = cudashm.get_contents_as_numpy(out, np.float32, [a.size])
        np.testing.assert_array_equal(got, a)
        status = made.get_cuda_shared_memory_status()
        listed = status if isinstance(status, list) else \
            [{"name": n} for n in status.regions]
        assert sorted(r["name"] for r in listed) == ["in", "out"]
    finally:
        made.unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(inp)
        cudashm.destroy_shared_memory_region(out)


def test_cuda_registration_errors_in_tritons_words(cudashm, client):
    made, _ = client
    handle = _region(cudashm, "r", 1024)
    try:
        made.register_cuda_shared_memory("r", cudashm.get_raw_handle(handle), 0, 1024)
        with pytest.raises(InferenceServerException, match="already in manager"):
            made.register_cuda_shared_memory("r", cudashm.get_raw_handle(handle), 0, 1024)
        bogus = base64.b64encode(bytes(64))
        with pytest.raises(InferenceServerException, match="failed to open CUDA IPC handle"):
            made.register_cuda_shared_memory("bad", bogus, 0, 1024)
        with pytest.raises(InferenceServerException, match="invalid device id"):
            made.register_cuda_shared_memory("dev", cudashm.get_raw_handle(handle), 99, 1024)
        with pytest.raises(InferenceServerException,
                           match="Unable to find cuda shared memory region: 'nope'"):
            made.get_cuda_shared_memory_status("nope")
        # a CUDA region is no system region, and the other way round
        with pytest.raises(InferenceServerException,
                           match="Unable to find system shared memory region: 'r'"):
            made.get_system_shared_memory_status("r")
    finally:
        made.unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(handle)
