"""Triton's own client tests for the ONNX Runtime and PyTorch (TorchScript) backends against
pbserve: L0_infer, L0_infer_zero, L0_infer_reshape, L0_infer_variable, L0_batcher,
L0_libtorch_io_names, L0_libtorch_io_types, L0_implicit_state, L0_sequence_batcher.

    python bench/triton_qa/backend_qa.py --server-repo /tmp/triton-server \
        [--only L0_infer ...] [--trials 0 1 2 4 v] [--out FILE] [--keep]

The checkout is only read: its qa/ folders are copied into a work folder. The models come
from Triton's generators (backend_data.py), the repositories are built as each test.sh
builds them (TARGET=cpu: KIND_CPU instance groups), one pbserve start per test.sh server
start, and the client files run unmodified under pytest with test.sh's environment
(BACKENDS="onnx libtorch", ENSEMBLES=0, ...). A conftest.py next to each client makes
test_util's validate_for_tf_model / _trt_ / _ensemble_ / _openvino_ answer False: those
backends (TensorFlow, TensorRT, ensembles of Triton's identity C++ backend) are not served
here, as BACKENDS says for the clients that read it; it also leaves out
TestResultCollector's result file (pytest's junit report counts the tests instead). What
each suite leaves out is listed with the reason (backend_cases.EXCLUDED,
backend_seq_cases.EXCLUDED).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import backend_cases  # noqa: E402
import backend_data  # noqa: E402
import backend_seq_cases  # noqa: E402
import report  # noqa: E402
import runner  # noqa: E402
from result import FAIL, PASS, SKIP, Result  # noqa: E402

SUITES = ("L0_infer", "L0_infer_zero", "L0_infer_reshape", "L0_infer_variable", "L0_batcher",
          "L0_libtorch_io_names", "L0_libtorch_io_types", "L0_implicit_state",
          "L0_sequence_batcher")
CONFTEST = '''"""backend_qa.py: only the ONNX Runtime and PyTorch backends are served."""
import sys
import unittest

sys.path.append("../common")
import test_util as tu

# test.sh counts tests from the test_results.txt TestResultCollector writes in unittest's
# runner; under pytest the junit report counts them and its run() hook has no result to read
tu.TestResultCollector.run = unittest.TestCase.run
tu.TestResultCollector.tearDownClass = classmethod(lambda cls: None)

for _name in ("validate_for_tf_model", "validate_for_trt_model",
              "validate_for_ensemble_model", "validate_for_openvino_model"):
    setattr(tu, _name, lambda *args, **kwargs: False)

# L0_batcher: its ragged test always tries the "custom" trial too, Triton's C++ identity
# backend (not served); the onnx and libtorch trials stay
if __import__("os").path.exists("batcher_test.py"):
    import batcher_test
    if "custom" in batcher_test._ragged_batch_supported_trials:
        batcher_test._ragged_batch_supported_trials.remove("custom")
'''


def prepare(server_repo: Path, root: Path) -> None:
    """Copy qa/common and the suites' folders; a conftest.py in each suite's folder."""
    qa = root / "qa"
    shutil.copytree(server_repo / "qa" / "common", qa / "common", symlinks=True)
    for suite in SUITES:
        shutil.copytree(server_repo / "qa" / suite, qa / suite, symlinks=True)
        (qa / suite / "conftest.py").write_text(CONFTEST)


def all_cases(data: Path, trials: tuple[str, ...]) -> list:
    return [*backend_cases.infer_cases(data), *backend_cases.batcher_cases(data),
            *backend_cases.libtorch_io_cases(data), backend_seq_cases.implicit_state_case(data),
            *backend_seq_cases.sequence_cases(data, trials, implicit=False),
            *backend_seq_cases.sequence_cases(data, trials, implicit=True)]


def suite_of(row: Result) -> str:
    return row.case.split(":", 1)[0]


def summary_table(rows: list[Result]) -> str:
    lines = ["| suite | ran | passed | failed | skipped by the test |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for suite in SUITES:
        mine = [r for r in rows if suite_of(r) == suite]
        if not mine:
            continue
        count = {s: sum(r.status == s for r in mine) for s in (PASS, FAIL, SKIP)}
        lines.append(f"| {suite} | {count[PASS] + count[FAIL]} | {count[PASS]} | "
                     f"{count[FAIL]} | {count[SKIP]} |")
    return "\n".join(lines)


def excluded_text() -> str:
    lines = ["Not run (what test.sh runs that is out of scope here):"]
    for table in (backend_cases.EXCLUDED, backend_seq_cases.EXCLUDED):
        for suite, items in table.items():
            lines += [f"  {suite}: {what}: {why}" for what, why in items]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-repo", type=Path, required=True)
    parser.add_argument("--only", action="append", default=[],
                        help="run only cases whose name starts with this (repeatable)")
    parser.add_argument("--trials", nargs="+", default=["0", "1", "2", "4", "v"],
                        help="L0_sequence_batcher's MODEL_TRIALS (test.sh: 0 1 2 4 v)")
    parser.add_argument("--out", type=Path, help="also write the output to this file")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="triton-qa-backends-"))
    roots = {"server": work / "server"}
    runner.READY_S = 600  # L0_infer loads ~70 models with 2 ONNX instances each
    rows: list[Result] = []
    started = time.monotonic()
    try:
        prepare(args.server_repo, roots["server"])
        commands = backend_data.generate(roots["server"] / "qa" / "common", work / "data")
        cases = all_cases(work / "data", tuple(args.trials))
        if args.only:
            cases = [c for c in cases if any(c.name.startswith(o) for o in args.only)]
        runner.run_cases(cases, roots, work / "runs", rows)
    finally:
        text = "\n\n".join([
            "Generators run (qa/common, unmodified):\n" + "\n".join(
                f"  {c}" for c in locals().get("commands", [])),
            report.table(rows) if rows else "(no rows)",
            summary_table(rows), excluded_text(),
            report.summary(rows) + f" in {time.monotonic() - started:.0f} s"]) + "\n"
        report.finish(text, args.out, work, args.keep)
    return 1 if any(r.status == FAIL for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
