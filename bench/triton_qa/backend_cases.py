"""Triton's L0 client tests for the ONNX Runtime and PyTorch backends (L0_infer,
L0_infer_zero, L0_infer_reshape, L0_infer_variable, L0_batcher, L0_libtorch_io_names,
L0_libtorch_io_types) as their test.sh scripts set them up, on generated models (`data`,
backend_data.py), TARGET=cpu, BACKENDS="onnx libtorch"."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from backend_edit import CPU_GROUP, append, copy, copy_all, rename, sed, sed_text
from spec import Case, Client

BACKENDS = "onnx libtorch"
FWS = ("onnx", "libtorch")
CUSTOM = "needs Triton's C++ custom backends (identity: custom_zero_1_float32)"

# What each suite's test.sh runs that is not run here, and why.
EXCLUDED = {
    "L0_infer": [
        ("TARGET=gpu pass (KIND_GPU models)", "GPU"),
        ("graphdef, savedmodel, plan backends", "TensorFlow / TensorRT (not pbserve backends)"),
        ("python, python_dlpack, openvino backends",
         "run by bench/triton_qa/run.py and openvino_infer.py"),
        ("ensembles (ENSEMBLES=0)", "built on nop_* / custom_zero_1_float32: Triton's "
         "identity C++ backend"),
        ("TEST_SYSTEM_SHARED_MEMORY / TEST_CUDA_SHARED_MEMORY variants", "CUDA shm; the "
         "system-shm variant is not one of the named runs"),
    ],
    "L0_infer_zero": [("graphdef/savedmodel/plan models, ensembles",
                       "TensorFlow / TensorRT; ensembles use Triton's identity C++ backend")],
    "L0_infer_reshape": [("graphdef/savedmodel/plan models, custom_* copies, ensembles",
                          "TensorFlow / TensorRT; custom_* and ensembles use Triton's "
                          "identity C++ backend")],
    "L0_infer_variable": [("TARGET=gpu pass", "GPU"),
                          ("graphdef/savedmodel/plan models, ensembles",
                           "TensorFlow / TensorRT; ensembles use Triton's identity backend")],
    "L0_batcher": [
        ("MAX_QUEUE_DELAY_ONLY_TESTS (2), test_multi_batch_preserve_ordering", CUSTOM),
        ("custom_zero_1_float32 in var_models, and the custom trial of test_multi_batch_"
         "different_shape_allow_ragged (its onnx and libtorch trials run)", CUSTOM),
        ("graphdef, savedmodel, plan backends", "TensorFlow / TensorRT"),
    ],
    "L0_libtorch_io_names": [],
    "L0_libtorch_io_types": [],
}

# test.sh's client env for every suite here (CPU only; the shm leak probe off, as run.py)
COMMON_ENV = {"BACKENDS": BACKENDS, "TRITON_SERVER_CPU_ONLY": "1", "ENSEMBLES": "0",
              "TEST_JETSON": "1"}


def _client(suite: str, target: str, label: str = "", **env: str) -> Client:
    return Client((target,), f"qa/{suite}", env={**COMMON_ENV, **env}, label=label)


def _models(data: Path, repo: str, prefixes: tuple[str, ...] = FWS) -> list[Path]:
    return sorted(p for p in (data / repo).iterdir()
                  if p.is_dir() and p.name.startswith(prefixes))


def _infer(data: Path, case_dir: Path, repo: Path, roots: dict) -> None:
    for model in copy_all(_models(data, "qa_model_repository"), repo):
        append(model, CPU_GROUP)  # test.sh: KIND_CPU for TARGET=cpu


def _zero(data: Path, case_dir: Path, repo: Path, roots: dict) -> None:
    copy_all([m for m in _models(data, "qa_identity_model_repository")
              if not m.name.startswith("plan_compatible")], repo)


def _reshape(data: Path, case_dir: Path, repo: Path, roots: dict) -> None:
    copy_all(_models(data, "qa_reshape_model_repository"), repo)


def _variable(data: Path, case_dir: Path, repo: Path, roots: dict) -> None:
    for model in copy_all(_models(data, "qa_variable_model_repository"), repo):
        append(model, CPU_GROUP)


def infer_cases(data: Path) -> list[Case]:
    return [
        Case("L0_infer", "server", (), setup=partial(_infer, data),
             clients=(_client("L0_infer", "infer_test.py", NOBATCH="1", BATCH="1"),)),
        Case("L0_infer_zero", "server", (), setup=partial(_zero, data),
             clients=(_client("L0_infer_zero", "infer_zero_test.py"),)),
        Case("L0_infer_reshape", "server", (), setup=partial(_reshape, data),
             clients=(_client("L0_infer_reshape", "infer_reshape_test.py"),)),
        Case("L0_infer_variable", "server", (), setup=partial(_variable, data),
             clients=(_client("L0_infer_variable", "infer_variable_test.py"),)),
    ]


# --- L0_batcher -------------------------------------------------------------------------

NO_DELAY_TESTS = (
    "test_static_batch_preferred", "test_static_batch_lt_any_preferred",
    "test_static_batch_not_preferred", "test_static_batch_gt_max_preferred",
    "test_multi_batch_not_preferred", "test_multi_batch_gt_max_preferred",
    "test_multi_batch_sum_gt_max_preferred", "test_multi_same_output0",
    "test_multi_same_output1", "test_multi_different_outputs",
    "test_multi_different_output_order")
DIFFERENT_SHAPE_TESTS = (
    "test_multi_batch_not_preferred_different_shape",
    "test_multi_batch_preferred_different_shape", "test_multi_batch_different_shape")
RAGGED_TEST = "test_multi_batch_different_shape_allow_ragged"
# test.sh's TRITONSERVER_DELAY_SCHEDULER for the tests that need the scheduler held
# (core/scheduling/delay_hooks.py)
DELAY_TESTS = {"test_multi_batch_delayed_sum_gt_max_preferred": "2",
               "test_multi_batch_use_biggest_preferred": "6",
               "test_multi_batch_use_best_preferred": "3",
               "test_multi_batch_delayed_use_max_batch": "3"}
VARIABLE_DELAY_TESTS = {"test_multi_batch_delayed_preferred_different_shape": "4"}
PREFERRED_BATCH_ONLY_TESTS = {"test_preferred_batch_only_aligned": "4",
                              "test_preferred_batch_only_unaligned": "5",
                              "test_preferred_batch_only_use_biggest_preferred": "7",
                              "test_preferred_batch_only_use_no_preferred_size": "3"}
PREFERRED_ONLY_DYNAMIC = "dynamic_batching { preferred_batch_size: [ 4, 6 ] }"
BATCHER_DYNAMIC = ("dynamic_batching { preferred_batch_size: [ 2, 6 ], "
                   "max_queue_delay_microseconds: 10000000 }")


def _batcher_model(model: Path, dynamic: str = BATCHER_DYNAMIC) -> None:
    sed(model, r"^max_batch_size:.*", "max_batch_size: 8")
    sed(model, r"^version_policy:.*", "version_policy: { specific { versions: [1] }}")
    append(model, dynamic)


def _batcher_models(data: Path, case_dir: Path, repo: Path, roots: dict,
                    dynamic: str = BATCHER_DYNAMIC) -> None:
    for fw in FWS:
        _batcher_model(copy(data / "qa_model_repository" / f"{fw}_float32_float32_float32",
                            repo), dynamic)


def _batcher_var_models(data: Path, case_dir: Path, repo: Path, roots: dict) -> None:
    for fw in FWS:
        model = copy(data / "qa_variable_model_repository" / f"{fw}_float32_float32_float32",
                     repo)
        _batcher_model(model)
        sed_all(model, "16", "-1")
    for fw, tensor in (("onnx", "INPUT0"), ("libtorch", "INPUT__0")):  # the ragged ones
        model = copy(data / "qa_identity_model_repository" / f"{fw}_nobatch_zero_1_float32",
                     repo, f"{fw}_zero_1_float32")
        rename(model, "nobatch_", "")
        sed(model, r"^max_batch_size:.*", "max_batch_size: 8")
        rename(model, f'name: "{tensor}"', f'name: "{tensor}"\nallow_ragged_batch: true')
        output = tensor.replace("INPUT", "OUTPUT")
        append(model, f'batch_output [{{target_name: "{output}" kind: '
                      f'BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "{tensor}" }}] '
                      + BATCHER_DYNAMIC)


def sed_all(model: Path, old: str, new: str) -> None:
    """`sed -i "s/old/new/g"`."""
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace(old, new))


def batcher_cases(data: Path) -> list[Case]:
    cases = []
    runs = [("FIXED", t, _batcher_models) for t in NO_DELAY_TESTS]
    runs += [("VARIABLE", t, _batcher_var_models)
             for t in (*NO_DELAY_TESTS, *DIFFERENT_SHAPE_TESTS, RAGGED_TEST)]
    runs += [(kind, t, setup) for kind, setup in (("FIXED", _batcher_models),
                                                  ("VARIABLE", _batcher_var_models))
             for t in DELAY_TESTS]
    runs += [("VARIABLE", t, _batcher_var_models) for t in VARIABLE_DELAY_TESTS]
    preferred_only = partial(_batcher_models, dynamic=PREFERRED_ONLY_DYNAMIC)
    runs += [("PREFERRED_BATCH_ONLY", t, preferred_only) for t in PREFERRED_BATCH_ONLY_TESTS]
    delays = {**DELAY_TESTS, **VARIABLE_DELAY_TESTS, **PREFERRED_BATCH_ONLY_TESTS}
    for kind, test, setup in runs:  # test.sh exports the hook to the client too
        env = {"TRITONSERVER_DELAY_SCHEDULER": delays[test]} if test in delays else {}
        client = _client("L0_batcher", f"batcher_test.py::BatcherTest::{test}",
                         BATCHER_TYPE="FIXED" if kind == "PREFERRED_BATCH_ONLY" else kind,
                         **env)
        cases.append(Case(f"L0_batcher:{kind}:{test}", "server", (),
                          setup=partial(setup, data), clients=(client,), server_env=env))
    return cases


# --- L0_libtorch_io_names / io_types ------------------------------------------------------

IO_NAMES = {  # model -> the test.sh's seds of libtorch_float32_float32_float32
    "libtorch_output_index": (),
    "libtorch_io_index": (("INPUT0", "INPUT__0"), ("INPUT1", "INPUT__1")),
    "libtorch_no_output_index": (("OUTPUT__0", "OUTPUT0"), ("OUTPUT__1", "OUTPUT1")),
    "libtorch_no_arguments_output_index": (("INPUT0", "INPUTA"), ("INPUT1", "INPUTB"),
                                           ("OUTPUT__0", "OUTPUTA"), ("OUTPUT__1", "OUTPUTB")),
    "libtorch_mix_index": (("INPUT0", "INPUTA"), ("INPUT1", "INPUT__1"),
                           ("OUTPUT__0", "OUTPUTA")),
    "libtorch_mix_arguments": (("INPUT1", "INPUTB"), ("OUTPUT__0", "OUTPUTA")),
    "libtorch_mix_arguments_index": (("INPUT1", "INPUT__1"), ("OUTPUT__0", "OUTPUT0")),
    "libtorch_unordered_index": (("INPUT0", "INPUT_TMP1"), ("INPUT1", "INPUT0"),
                                 ("INPUT_TMP1", "INPUT1"), ("OUTPUT__0", "OUT__1"),
                                 ("OUTPUT__1", "OUT__0")),
}


def _io_names(data: Path, case_dir: Path, repo: Path, roots: dict) -> None:
    src = data / "qa_model_repository" / "libtorch_float32_float32_float32"
    for name, edits in IO_NAMES.items():
        model = copy(src, repo, name)
        rename(model, "libtorch_float32_float32_float32", name)
        for old, new in edits:
            rename(model, old, new)


def _io_type(data: Path, src: str, name: str, edits: tuple, case_dir: Path, repo: Path,
             roots: dict) -> None:
    model = copy(data / src, repo, name)
    rename(model, src.rsplit("/", 1)[-1], name)
    sed(model, "kind: KIND_GPU", "kind: KIND_CPU")  # the generator's group; TARGET=cpu
    for old, new in edits:
        rename(model, old, new)
    if name == "libtorch_invalid_sequence_int32":
        sed_text(model, r"CORRID\n(.*)int32_false_true: \[ 0, 1 \]",
                 "CORRID\ndata_type: TYPE_UINT32")


IO_TYPES = (
    ("qa_model_repository/libtorch_int32_int8_int8", "libtorch_invalid_input_type",
     (("TYPE_INT32", "TYPE_UINT32"),),
     "unsupported datatype TYPE_UINT32 for input 'INPUT0' for model "
     "'libtorch_invalid_input_type'"),
    ("qa_model_repository/libtorch_int32_int8_int8", "libtorch_invalid_output_type",
     (("TYPE_INT8", "TYPE_UINT64"),),
     "unsupported datatype TYPE_UINT64 for output 'OUTPUT__0' for model "
     "'libtorch_invalid_output_type'"),
    ("qa_variable_sequence_model_repository/libtorch_sequence_int32",
     "libtorch_invalid_sequence_int32",
     (("READY__2", "CORRID__2"), ("CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_CORRID")),
     "input 'CORRID__2' type 'TYPE_UINT32' is not supported by PyTorch."),
)


def libtorch_io_cases(data: Path) -> list[Case]:
    cases = [Case("L0_libtorch_io_names", "server", (), setup=partial(_io_names, data),
                  clients=(_client("L0_libtorch_io_names", "io_names_client.py"),))]
    for src, name, edits, error in IO_TYPES:
        cases.append(Case(f"L0_libtorch_io_types:{name}", "server", (),
                          setup=partial(_io_type, data, src, name, edits),
                          load_error=error))
    return cases
