"""Run Triton's own Python-backend tests (qa/L0_backend_python, qa/python_models) and the
python_backend examples against pbserve; print a table and a summary line.

    python bench/triton_qa/run.py --server-repo /tmp/triton-server \
        --python-backend-repo /tmp/python_backend [--only NAME] [--out FILE]

The checkouts are only read: their qa/ and examples/ folders are copied into a temporary
folder, where the clients run (they write logs next to themselves).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases_examples  # noqa: E402
import cases_gpu  # noqa: E402
import cases_l0  # noqa: E402
import report  # noqa: E402
from runner import run_cases  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-repo", type=Path, required=True)
    parser.add_argument("--python-backend-repo", type=Path, required=True)
    parser.add_argument("--only", action="append", default=[],
                        help="run only cases whose name starts with this (repeatable)")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()

    cases = [*cases_l0.CASES, *cases_examples.CASES, *cases_gpu.CASES]
    if args.only:
        cases = [c for c in cases if any(c.name.startswith(o) for o in args.only)]
    work = Path(tempfile.mkdtemp(prefix="triton-qa-"))
    roots = {"server": work / "server", "python_backend": work / "python_backend"}
    shutil.copytree(args.server_repo / "qa", roots["server"] / "qa", symlinks=True)
    shutil.copytree(args.python_backend_repo / "examples", roots["python_backend"] / "examples",
                    symlinks=True)
    rows = []
    try:
        run_cases(cases, roots, work / "runs", rows)
    finally:
        report.finish(report.table(rows) + "\n\n" + report.summary(rows) + "\n", args.out,
                      work, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
