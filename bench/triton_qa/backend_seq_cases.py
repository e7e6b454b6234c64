"""Triton's sequence tests for the ONNX Runtime and PyTorch backends: L0_implicit_state
(implicit_state.py) and L0_sequence_batcher (sequence_batcher_test.py, with and without
implicit state, as L0_implicit_state runs it), set up as their test.sh scripts do."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from backend_cases import COMMON_ENV
from backend_edit import append, copy, sed
from spec import Case, Client

IMPLICIT_CPP = ("needs Triton's C++ implicit_state test backend (libtriton_implicit_state.so)")
IMPLICIT_CPP_TESTS = ("test_no_implicit_state", "test_wrong_implicit_state_name",
                      "test_implicit_state_single_buffer", "test_implicit_state_growable_memory",
                      "test_no_update")
GPU_TO_CPU = "KIND_GPU -> KIND_CPU (the generators write KIND_GPU; TARGET=cpu)"

EXCLUDED = {
    "L0_implicit_state": [(f"implicit_state.py::{t}", IMPLICIT_CPP) for t in IMPLICIT_CPP_TESTS]
    + [("plan backend", "TensorRT"),
       ("--cuda-virtual-address-size, growable GPU state", "GPU")],
    "L0_sequence_batcher": [
        ("QUEUE_DELAY_TESTS (3)", "their queue_delay_models repository is not built by "
         "this harness (yet); they count a direct batch's padded size (no_min_util expects "
         "batch sizes {2: 2} for 3 requests), which pbserve does not pad "
         "(docs/sequence_batching.md)"),
        ("custom backend, test_ragged_batch_allowed", "Triton's C++ custom sequence backend"),
        ("graphdef, savedmodel, plan backends", "TensorFlow / TensorRT"),
        ("ensembles (ENSEMBLES=0)", "built on nop_* models of Triton's identity C++ backend"),
        ("libtorch *_object models", "test.sh leaves them out too (outside valgrind runs)"),
    ],
}


def _implicit(data: Path, case_dir: Path, repo: Path, roots: dict) -> None:
    src = data / "qa_sequence_implicit_model_repository"
    for fw, state in (("onnx", "OUTPUT_STATE"), ("libtorch", "OUTPUT_STATE__1")):
        name = f"{fw}_nobatch_sequence_int32"
        _to_cpu(copy(src / name, repo))
        model = copy(src / name, repo, f"{name}_output")
        _to_cpu(model)
        sed(model, r"^name:.*", f'name: "{name}_output"')
        append(model, f'output [{{ name: "{state}" \n data_type: TYPE_INT32 \n dims: [ 1 ] }}]')


def _to_cpu(model: Path) -> None:
    sed(model, "kind: KIND_GPU", "kind: KIND_CPU")


def implicit_state_case(data: Path) -> Case:
    env = {**COMMON_ENV, "BACKENDS": "libtorch onnx", "IMPLICIT_STATE": "1",
           "INITIAL_STATE_ZERO": "0", "INITIAL_STATE_FILE": "0", "SINGLE_STATE_BUFFER": "0"}
    client = Client(("implicit_state.py",), "qa/L0_implicit_state", env=env,
                    deselect={f"ImplicitStateTest::{t}": IMPLICIT_CPP
                              for t in IMPLICIT_CPP_TESTS})
    return Case("L0_implicit_state", "server", (), setup=partial(_implicit, data),
                clients=(client,))


NO_DELAY_TESTS = ("test_simple_sequence", "test_length1_sequence", "test_batch_size",
                  "test_no_sequence_start", "test_no_sequence_start2", "test_no_sequence_end",
                  "test_no_correlation_id")
# test.sh's TRITONSERVER_DELAY_SCHEDULER and _BACKLOG_DELAY_SCHEDULER for the tests that
# need the scheduler held (core/scheduling/delay_hooks.py): test -> (delay, backlog)
DELAY_TESTS = {"test_backlog_fill": ("10", "2"), "test_backlog_fill_no_end": ("10", "3"),
               "test_backlog_same_correlation_id": ("12", "2"),
               "test_backlog_same_correlation_id_no_end": ("16", "0"),
               "test_backlog_sequence_timeout": ("4", "0"), "test_half_batch": ("8", "0"),
               "test_skip_batch": ("12", "0"), "test_full_batch": ("12", "0"),
               "test_ragged_batch": ("12", "0"), "test_backlog": ("12", "0")}
# test.sh's MODEL_TRIALS: repository -> (max_batch_size, instance count)
TRIALS = {"0": (None, 4), "1": (4, 1), "2": (2, 2), "4": (1, 4), "v": (4, 1)}


def _dtypes(fw: str, implicit: bool) -> tuple[str, ...]:
    return ("object", "int32", "bool") if implicit else ("int32", "bool")


def _sequence(data: Path, trial: str, implicit: bool, case_dir: Path, repo: Path,
              roots: dict) -> None:
    fixed = "qa_sequence_implicit_model_repository" if implicit else \
        "qa_sequence_model_repository"
    variable = "qa_variable_sequence_implicit_model_repository" if implicit else \
        "qa_variable_sequence_model_repository"
    source = data / (variable if trial == "v" else fixed)
    batch, count = TRIALS[trial]
    for fw in ("onnx", "libtorch"):
        for dtype in _dtypes(fw, implicit):
            if fw == "libtorch" and dtype == "object" and trial != "0":
                continue  # test.sh: libtorch object models only in models0
            name = f"{fw}_nobatch_sequence_{dtype}" if trial == "0" else \
                f"{fw}_sequence_{dtype}"
            model = copy(source / name, repo)
            _to_cpu(model)
            if batch is not None:
                sed(model, r"^max_batch_size:.*", f"max_batch_size: {batch}")
            sed(model, "kind: KIND_CPU", f"kind: KIND_CPU\ncount: {count}")


def sequence_cases(data: Path, trials: tuple[str, ...], implicit: bool) -> list[Case]:
    cases = []
    mode = "implicit" if implicit else "explicit"
    for trial in trials:
        batch, count = TRIALS[trial]
        env = {**COMMON_ENV, "NO_BATCHING": "1" if trial == "0" else "0",
               "MODEL_INSTANCES": str(count if trial != "v" else 1),
               "BATCHER_TYPE": "VARIABLE" if trial == "v" else "FIXED",
               "IMPLICIT_STATE": "1" if implicit else "0", "INITIAL_STATE_FILE": "0",
               "INITIAL_STATE_ZERO": "0", "USE_SINGLE_BUFFER": "0"}
        for test in (*NO_DELAY_TESTS, *DELAY_TESTS):
            delay, backlog = DELAY_TESTS.get(test, ("", ""))
            server_env = {"TRITONSERVER_DELAY_SCHEDULER": delay,
                          "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": backlog} if delay else {}
            client = Client((f"sequence_batcher_test.py::SequenceBatcherTest::{test}",),
                            "qa/L0_sequence_batcher", env={**env, **server_env})
            cases.append(Case(f"L0_sequence_batcher:{mode}:models{trial}:{test}", "server",
                              (), setup=partial(_sequence, data, trial, implicit),
                              clients=(client,), server_env=server_env))
    return cases
