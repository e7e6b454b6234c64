"""Cases of Triton's qa/L0_backend_python (server repository), as its test.sh scripts run them.

Each case copies the same `qa/python_models` (or the subtest's own `models/`) with the same
config edits, and runs the same client. Parts that need torch run where it imports; those
that need a GPU, ONNX/libtorch models from Triton's data sets, conda environments or a
tritonserver build are skipped with why.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from repository import renamed
from spec import Case, Client, Model

L0 = "qa/L0_backend_python"
TORCH = "needs torch (the model imports it)"
HAS_TORCH = importlib.util.find_spec("torch") is not None
SHM_LEAK = "../test_infer_shm_leak.py"


def qa(folder: str, **kw) -> Model:
    """A model of qa/python_models."""
    return Model(f"qa/python_models/{folder}", **kw)


def local(sub: str, name: str) -> Model:
    """A model of a subtest's own models/ folder."""
    return Model(f"{L0}/{sub}/models/{name}", model="1/model.py")


def shm_leak(sub: str, model: str, **env: str) -> Client:
    """test_infer_shm_leak.py: the model runs its own unittest and answers OUTPUT0 == 1."""
    return Client((SHM_LEAK,), f"{L0}/{sub}", env={"MODEL_NAME": model, **env}, label=model)


def _uint8(name: str, batch: bool) -> Model:
    subs = [renamed(name), ("TYPE_FP32", "TYPE_UINT8")]
    subs.append((r"^max_batch_size:.*", "max_batch_size: 8" if batch else ""))
    append = ("dynamic_batching { preferred_batch_size: [8], "
              "max_queue_delay_microseconds: 12000000 }",) if batch else ()
    return qa("identity_fp32", name=name, subs=tuple(subs), append=append)


MAIN = Case(
    "python_test", "server",
    (
        qa("identity_fp32"),
        _uint8("identity_uint8", batch=True),
        _uint8("identity_uint8_nobatch", batch=False),
        qa("identity_fp32", name="identity_uint32",
           subs=(renamed("identity_uint32"), ("TYPE_FP32", "TYPE_UINT32"))),
        qa("identity_fp32", name="identity_bool",
           subs=(renamed("identity_bool"), ("TYPE_FP32", "TYPE_BOOL"))),
        qa("identity_fp32", name="default_model_name", model_file="mymodel.py",
           subs=(renamed("default_model_name"),),
           append=('default_model_filename: "mymodel.py"',)),
        qa("delayed_model"),
        qa("init_args", subs=(("TRITON_DIR_PATH", "/opt/tritonserver"),)),
        qa("optional"),
        qa("non_contiguous"),
        qa("string"),
        qa("string_fixed"),
    ) + ((qa("identity_bf16"), qa("pytorch_fp32_fp32", subs=(renamed("pytorch_fp32_fp32"),)))
         if HAS_TORCH else ()),
    clients=(Client(("python_test.py",), L0, deselect={
        # r24.10's test sends FP32 arrays as BF16; tritonclient r26.06+ refuses them
        # client-side (BF16 must be ml_dtypes.bfloat16 arrays there).
        "PythonTest::test_bf16": "tritonclient r26.06+ refuses this r24.10 test's FP32 "
                                 "arrays as BF16 (identity_bf16)" if HAS_TORCH else
                                 TORCH + " (identity_bf16)",
        **({} if HAS_TORCH else {
            "PythonTest::test_infer_pytorch": TORCH + " (pytorch_fp32_fp32)"}),
    }),),
    # init_args expects its repository at $TRITON_DIR/qa/L0_backend_python/models.
    server_env={"TRITON_DIR": "{case_dir}"},
    repo_path="qa/L0_backend_python/models",
)

SERVER_STARTS = (
    Case("multi_file", "server", (
        qa("multi_file", extra=("file1.py", "file2.py"), config="../identity_fp32/config.pbtxt",
           subs=(renamed("multi_file"),)),)),
    Case("model_env", "server", (qa("model_env"),), server_env={"MY_ENV": "MY_ENV"}),
    Case("init_exit", "server", (qa("init_exit"),),
         load_error="Stub process 'init_exit_0_0' is not healthy."),
)

ENSEMBLE = Case(
    "ensemble", "server",
    (Model("qa/python_models/ensemble", model=None),
     qa("add_sub", name="add_sub_1"), qa("add_sub", name="add_sub_2")),
    clients=(Client(("ensemble_test.py",), f"{L0}/ensemble", deselect={
        "EnsembleTest::test_ensemble_gpu": "GPU: run by cases_gpu's gpu_ensemble"}),),
)

BLS_ERROR = "BLS is only supported during the 'execute' function."
BLS = (
    Case("bls", "server", (), skip="bls, bls_async (GPU tensors, CUDA memory pool): run by "
         "cases_gpu's gpu_bls_*"),
    Case("bls_memory", "server",
         (qa("bls_memory"), qa("bls_memory_async"), qa("add_sub"), qa("identity_fp32")),
         clients=(shm_leak("bls", "bls_memory"), shm_leak("bls", "bls_memory_async")),
         server_env={"BLS_KIND": "non_decoupled"}),
    Case("bls_memory_decoupled", "server",
         (qa("bls_memory"), qa("bls_memory_async"), qa("add_sub"), qa("identity_fp32")),
         clients=(shm_leak("bls", "bls_memory"), shm_leak("bls", "bls_memory_async")),
         server_env={"BLS_KIND": "decoupled"}),
    Case("bls_init_error", "server", (qa("bls_init_error"),), load_error=BLS_ERROR),
    Case("bls_finalize_error", "server", (qa("bls_finalize_error"),), log_after=(BLS_ERROR,)),
    Case("bls_model_loading", "server", (), skip="needs an ONNX model from Triton's data sets"),
    Case("bls_parameters", "server", (qa("bls_parameters"),), clients=(
        Client(("bls_parameters_test.py",), f"{L0}/bls", pytest=False),)),
)

_DECOUPLED_LOCAL = ("decoupled_bls_stream", "decoupled_execute_error",
                    "decoupled_raise_exception", "decoupled_return_response_error",
                    "decoupled_send_after_close_error")
DECOUPLED = Case(
    "decoupled", "server",
    (qa("identity_fp32"),
     qa("execute_cancel", append=("model_transaction_policy { decoupled: True }",)),
     Model("examples/decoupled", name="square_int32", model="square_model.py",
           config="square_config.pbtxt", checkout="python_backend"),
     *(local("decoupled", name) for name in _DECOUPLED_LOCAL)),
    clients=(Client(("decoupled_test.py",), f"{L0}/decoupled", deselect={
        "DecoupledTest::test_decoupled_bls": "decoupled_bls calls dlpack_add_sub, which "
                                             "moves its tensors to CUDA: run by cases_gpu's "
                                             "gpu_decoupled_bls"}),),
    # test.sh also counts decoupled_bls's Logger lines ("Specific Msg!", ...): torch.
    log_after=("Finalize invoked", "Finalize complete..."),
    log_name=f"{L0}/decoupled/decoupled_server.log",
)


def _sender(name: str, model: str, decoupled: bool, batching: bool) -> Model:
    append = []
    if decoupled:
        append.append("model_transaction_policy { decoupled: True }")
    if batching:
        append.append("dynamic_batching { max_queue_delay_microseconds: 500000 }")
    return qa("response_sender", name=name, model=model, extra=("model_common.py",),
              append=tuple(append))


RESPONSE_SENDER = (
    Case("response_sender", "server", tuple(
        _sender("response_sender" + ("_decoupled" if d else "") + ("_async" if a else "")
                + ("_batching" if b else ""), "model_async.py" if a else "model.py", d, b)
        for b in (False, True) for d in (False, True) for a in (False, True)),
        clients=(Client(("response_sender_test.py",), f"{L0}/response_sender"),)),
    Case("response_sender_complete_final", "server", (qa("response_sender_complete_final"),),
         clients=(Client(("response_sender_complete_final_test.py",),
                         f"{L0}/response_sender"),)),
)

IO = (
    Case("io_requested_output", "server", (qa("add_sub"),), clients=(
        Client(("io_test.py::IOTest::test_requested_output_default",), f"{L0}/io"),)),
    Case("io_dlpack", "server", (), skip="test_ensemble_io, test_empty_gpu_output, "
         "test_variable_gpu_output, test_requested_output_decoupled (GPU tensors): run by "
         "cases_gpu's gpu_io_*"),
)

ASYNC_EXECUTE = Case(
    "async_execute", "server",
    (qa("async_execute_decouple"), qa("async_execute_decouple_bls")),
    clients=(Client(("concurrency_test.py",), f"{L0}/async_execute"),),
)

LIFECYCLE = (
    Case("lifecycle", "server", (
        qa("error_code"), qa("execute_cancel"),
        qa("execute_error", subs=(renamed("execute_error"),
                                  (r"^max_batch_size:.*", "max_batch_size: 8")),
           append=("dynamic_batching { preferred_batch_size: [8], "
                   "max_queue_delay_microseconds: 12000000 }",)),
        qa("execute_grpc_error", subs=(renamed("execute_grpc_error"),
                                       (r"^max_batch_size:.*", "max_batch_size: 8")),
           append=("dynamic_batching { preferred_batch_size: [8], "
                   "max_queue_delay_microseconds: 1200000 }",)),
        qa("execute_return_error"),
        qa("wrong_model", subs=(renamed("wrong_model"), ("TYPE_FP32", "TYPE_UINT32"))),
    ), clients=(Client(("lifecycle_test.py",), f"{L0}/lifecycle"),),
        log_name=f"{L0}/lifecycle/lifecycle_server.log"),
    Case("init_error", "server", (qa("init_error"),),
         load_error="name 'lorem_ipsum' is not defined"),
    Case("fini_error", "server", (qa("fini_error"),),
         log_after=("name 'undefined_variable' is not defined",)),
    Case("auto_complete_error", "server", (qa("auto_complete_error", config=None),),
         server_args=("--strict-model-config=false",),
         load_error="name 'undefined_variable' is not defined"),
)

ARGUMENT_VALIDATION = Case(
    "argument_validation", "server", (local("argument_validation", "argument_validation"),),
    clients=(shm_leak("argument_validation", "argument_validation"),))

_LOG_MSGS = ("Specific Msg!", "Info Msg!", "Warning Msg!", "Error Msg!")
LOGGING = (
    Case("logging", "server", (qa("identity_fp32_logging"),),
         server_args=("--log-verbose", "0"),
         clients=(Client(("logging_test.py",), f"{L0}/logging"),), log_after=_LOG_MSGS),
    Case("logging_verbose", "server", (qa("identity_fp32_logging"),),
         server_args=("--log-verbose", "0"),
         http_posts=(("/v2/logging", '{"log_verbose_level":1}'),),
         clients=(Client(("logging_test.py",), f"{L0}/logging"),),
         log_after=(*_LOG_MSGS, "Verbose Msg!")),
)

CUSTOM_METRICS = Case("custom_metrics", "server", (qa("custom_metrics"),),
                      clients=(shm_leak("custom_metrics", "custom_metrics"),))

MODEL_CONTROL = Case(
    "model_control", "server",
    (qa("identity_fp32"), Model("qa/python_models/simple_identity_fp32", model=None)),
    server_args=("--model-control-mode=explicit",),
    clients=(Client(("model_control_test.py",), f"{L0}/model_control"),))

REQUEST_RESCHEDULING = Case(
    "request_rescheduling", "server",
    (qa("bls_request_rescheduling"), qa("request_rescheduling_addsub"),
     qa("iterative_sequence"), qa("wrong_return_type")),
    server_args=("--model-control-mode=explicit", "--load-model=*"),
    clients=(shm_leak("request_rescheduling", "bls_request_rescheduling"),
             Client(("grpc_endpoint_test.py",), f"{L0}/request_rescheduling")))


def _python_based_backends(case_dir: Path, repo: Path, roots: dict[str, Path]) -> None:
    """python_based_backends/test.sh: the add_sub backend in a backend directory, models
    of it (versions 1 and 2 of `add`), add_sub in two versions, and its pytorch model."""
    models = roots["server"] / "qa/python_models"
    backend = case_dir / "backends" / "add_sub"
    backend.mkdir(parents=True, exist_ok=True)
    shutil.copy(models / "python_based_backends/add_sub_backend/model.py", backend)
    for name, operation, versions in (("add", "add", (1, 2)), ("sub", "sub", (1,))):
        for version in versions:
            (repo / name / str(version)).mkdir(parents=True, exist_ok=True)
            (repo / name / str(version) / "model.json").write_text(
                json.dumps({"operation": operation}))
        (repo / name / "config.pbtxt").write_text('backend: "add_sub"\n')
    for version in ("1", "2"):
        (repo / "add_sub" / version).mkdir(parents=True, exist_ok=True)
        shutil.copy(models / "add_sub/model.py", repo / "add_sub" / version)
    shutil.copy(models / "add_sub/config.pbtxt", repo / "add_sub")
    subprocess.run([sys.executable, str(roots["server"] / "qa/common/gen_qa_pytorch_model.py"),
                    "-m", str(repo)], check=True, cwd=case_dir)


PYTHON_BASED_BACKENDS = Case(
    "python_based_backends", "server", (),
    server_args=("--backend-directory={case_dir}/backends", "--model-control-mode=explicit"),
    clients=(Client(("python_based_backends_test.py",), f"{L0}/python_based_backends"),),
    setup=_python_based_backends, skip="" if HAS_TORCH else
    "generates a libtorch model: " + TORCH)

NOT_RUN = (
    Case("env", "server", (), skip="EXECUTION_ENV conda-pack environments (conda)"),
    Case("variants", "server", (), skip="builds python_backend's C++ stub from source"),
    Case("restart", "server", (), skip="disabled in Triton's own L0 test.sh at this tag"),
    Case("add_sub_gpu", "server", (), skip="KIND_GPU model: run by cases_gpu's "
         "gpu_add_sub_kind_gpu"),
)

CASES: tuple[Case, ...] = (
    MAIN, *SERVER_STARTS, ENSEMBLE, *BLS, DECOUPLED, *RESPONSE_SENDER, *IO, ASYNC_EXECUTE,
    *LIFECYCLE, ARGUMENT_VALIDATION, *LOGGING, CUSTOM_METRICS, MODEL_CONTROL,
    REQUEST_RESCHEDULING, PYTHON_BASED_BACKENDS, *NOT_RUN,
)
