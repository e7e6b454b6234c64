"""The GPU cases of Triton's qa/L0_backend_python and qa/L0_dlpack_multi_gpu, as their
test.sh scripts run them (issue 46; docs/gpu.md, "Triton's own GPU tests").

Run on a machine with a CUDA GPU (`bash bench/gpu_run.sh` on the `device` tool's machine);
elsewhere each case is listed as skipped. Clients run with TEST_JETSON=0, as Triton's GPU
runs do: that turns on python_test's CUDA shared-memory tests and the shm leak probe,
whose `triton_shm_monitor` (a C extension of Triton's container) is stood in for by
`shim/triton_shm_monitor.py`: the probe watches regions named
triton_python_backend_shm_region*, and pbserve makes none, so it has nothing to read.
Models of Triton's data sets (libtorch_*, onnx_nobatch_sequence_int32) are made with its
own generators, unmodified, into the work folder's data/ (`_generated`); where the onnx
package is newer than onnxruntime, the ONNX models are converted to the opset and IR
version it reads (`backend_data.fit_onnx`).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import backend_edit
from backend_data import fit_onnx, run_generator
from cases_l0 import L0, local, qa, shm_leak
from repository import renamed
from spec import Case, Client, Model

from pbserve.core.config.gpus import visible_gpus

SHIM = Path(__file__).resolve().parent / "shim"
GPU_ENV = {"TEST_JETSON": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, (str(SHIM), os.environ.get("PYTHONPATH"))))}
NO_GPU = "needs a CUDA GPU (bash bench/gpu_run.sh on a lent GPU machine)"
SKIP = "" if visible_gpus() else NO_GPU  # as pbserve sees GPUs: KIND_GPU loads then


def _generated(roots: dict[str, Path], repository: str, model: str) -> Path:
    """A model of Triton's data sets (`${DATADIR}/<repository>/<model>`), made once per run
    by qa/common's generator as gen_qa_model_repository runs it."""
    data = roots["server"].parent / "data"
    folder = data / repository / model
    if not folder.exists():
        common = roots["server"] / "qa/common"
        runs = {"qa_model_repository": [("gen_qa_models.py", "--libtorch"),
                                        ("gen_qa_models.py", "--onnx")],
                "qa_sequence_implicit_model_repository": [
                    ("gen_qa_implicit_models.py", "--onnx")]}[repository]
        for generator, flag in runs:
            run_generator(common, generator, (flag,), data / repository)
        lowered = fit_onnx(data / repository)
        if lowered:
            print(f"    {repository}: {lowered}", file=sys.stderr, flush=True)
    return folder


def _copy_generated(roots: dict[str, Path], repository: str, model: str, into: Path,
                    name: str = "", append: str = "", keep_version: str = "") -> Path:
    """`cp -r ${DATADIR}/<repository>/<model> models/<name>`, `sed` of its name, `echo`
    of `append`; with `keep_version`, the other version folders removed."""
    dest = backend_edit.copy(_generated(roots, repository, model), into, name)
    if name:
        backend_edit.rename(dest, model, name)
    if append:
        backend_edit.append(dest, append)
    if keep_version:
        for version in dest.iterdir():
            if version.is_dir() and version.name != keep_version:
                shutil.rmtree(version)
    return dest


# -- python_test.py: the CUDA shared-memory errors, and test.sh's KIND_GPU start ----------
PYTHON_TEST = Case(
    "gpu_python_test", "server",
    (qa("identity_fp32", name="identity_bool",
        subs=(renamed("identity_bool"), ("TYPE_FP32", "TYPE_BOOL"))),
     qa("dlpack_identity")),
    clients=(Client(("python_test.py", "-k", "test_gpu_tensor_error or test_dlpack_tensor_error"),
                    L0, env=GPU_ENV),),
    skip=SKIP)

ADD_SUB_GPU = Case(
    "gpu_add_sub_kind_gpu", "server",
    (qa("add_sub", name="add_sub_gpu", config="../add_sub_gpu/config.pbtxt"),), skip=SKIP)


# -- io/: ensembles of dlpack_io_identity steps, empty and variable GPU outputs ----------
def _io_identity(decoupled: bool) -> tuple[Model, ...]:
    src = "dlpack_io_identity_decoupled" if decoupled else "dlpack_io_identity"
    return tuple(qa(src, name=f"dlpack_io_identity_{i}",
                    subs=(renamed(f"dlpack_io_identity_{i}"),)) for i in (1, 2, 3))


def _io_client(test: str, **env: str) -> Client:
    return Client((f"io_test.py::IOTest::{test}",), f"{L0}/io", env={**GPU_ENV, **env})


IO = (
    *(Case(f"gpu_io_ensemble_{trial}", "server",
           (*_io_identity(trial == "decoupled"), Model("qa/python_models/ensemble_io",
                                                       model=None)),
           clients=(_io_client("test_ensemble_io", TRIAL=trial),), skip=SKIP)
      for trial in ("default", "decoupled")),
    Case("gpu_io_empty_output", "server", (qa("dlpack_empty_output"),),
         clients=(_io_client("test_empty_gpu_output"),), skip=SKIP),
    Case("gpu_io_variable_output", "server", (qa("variable_gpu_output"),),
         clients=(_io_client("test_variable_gpu_output"),), skip=SKIP),
    Case("gpu_io_requested_output", "server",
         (qa("add_sub"), qa("dlpack_io_identity_decoupled")),
         clients=(_io_client("test_requested_output_default"),
                  _io_client("test_requested_output_decoupled")), skip=SKIP),
)


# -- ensemble/: a Python step, then a TorchScript model on KIND_GPU ----------------------
def _ensemble_gpu(case_dir: Path, repo: Path, roots: dict[str, Path]) -> None:
    """ensemble/test.sh: libtorch_float32_float32_float32 with KIND_GPU, max_batch_size 0,
    no version_policy, only version 1."""
    dest = _copy_generated(roots, "qa_model_repository", "libtorch_float32_float32_float32",
                           repo, append="instance_group [ { kind: KIND_GPU }]",
                           keep_version="1")
    backend_edit.sed(dest, r"^max_batch_size:.*", "max_batch_size: 0")
    backend_edit.sed(dest, r"^version_policy:.*", "")


ENSEMBLE = Case(
    "gpu_ensemble", "server",
    (Model("qa/python_models/ensemble", model=None), Model("qa/python_models/ensemble_gpu",
                                                            model=None),
     qa("add_sub", name="add_sub_1"), qa("add_sub", name="add_sub_2")),
    clients=(Client(("ensemble_test.py",), f"{L0}/ensemble", env=GPU_ENV),),
    setup=_ensemble_gpu, skip=SKIP)


# -- bls/: the self-testing BLS models, both BLS_KIND trials, two CUDA pool sizes --------
def _bls_data(case_dir: Path, repo: Path, roots: dict[str, Path]) -> None:
    """bls/test.sh's models of Triton's data sets: the implicit-state ONNX sequence model
    and libtorch_gpu / libtorch_cpu for the preferred-memory case."""
    _copy_generated(roots, "qa_sequence_implicit_model_repository",
                    "onnx_nobatch_sequence_int32", repo)
    for kind in ("gpu", "cpu"):
        _copy_generated(roots, "qa_model_repository", "libtorch_nobatch_float32_float32_float32",
                        repo, name=f"libtorch_{kind}",
                        append=f"instance_group [ {{ kind: KIND_{kind.upper()}}} ]")


BLS_MODELS = (
    qa("bls"), qa("dlpack_add_sub"), qa("bls_async"), qa("bls_memory"), qa("bls_memory_async"),
    qa("add_sub"), qa("execute_error"), qa("identity_fp32"), qa("dlpack_identity"),
    Model("examples/decoupled", name="square_int32", model="square_model.py",
          config="square_config.pbtxt", checkout="python_backend"),
    qa("dlpack_square"), qa("identity_fp32_timeout"),
)
BLS = tuple(
    Case(f"gpu_bls_{trial}_{pool_mb}mb", "server", BLS_MODELS,
         clients=tuple(shm_leak("bls", name, **GPU_ENV)
                       for name in ("bls", "bls_memory", "bls_memory_async", "bls_async")),
         server_args=(f"--cuda-memory-pool-byte-size=0:{pool_mb << 20}",),
         server_env={"BLS_KIND": trial},
         log_after=("Request timeout: 11000000000",),
         log_lacks=("Failed to allocate memory from CUDA memory pool",),
         setup=_bls_data, skip=SKIP)
    for pool_mb in (64, 256) for trial in ("non_decoupled", "decoupled"))


# -- decoupled/: the BLS test deselected in the CPU run (dlpack_add_sub on the GPU) ------
DECOUPLED_BLS = Case(
    "gpu_decoupled_bls", "server",
    (local("decoupled", "decoupled_bls"), qa("dlpack_add_sub"), qa("identity_fp32")),
    clients=(Client(("decoupled_test.py::DecoupledTest::test_decoupled_bls",),
                    f"{L0}/decoupled", env=GPU_ENV),),
    log_after=("Specific Msg!", "Info Msg!", "Warning Msg!", "Error Msg!"), skip=SKIP)

# -- L0_dlpack_multi_gpu: the self-testing dlpack_test model, on one GPU (its test.sh copies
#    test_infer_shm_leak.py beside it; run from a subtest folder, its ../../common holds) --
DLPACK_TEST = Case(
    "gpu_dlpack_test", "server", (qa("dlpack_test"),),
    clients=(shm_leak("io", "dlpack_test", **GPU_ENV),),
    skip=SKIP)

CASES: tuple[Case, ...] = (PYTHON_TEST, ADD_SUB_GPU, *IO, ENSEMBLE, *BLS, DECOUPLED_BLS,
                           DLPACK_TEST)
