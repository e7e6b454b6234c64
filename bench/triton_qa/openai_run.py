"""Run Triton's OpenAI frontend tests (server repository, python/openai/tests/) that
need no vLLM, TensorRT-LLM or downloaded model against pbserve's --openai-port; print
one row per test and a summary line.

    python bench/triton_qa/openai_run.py --server-repo /tmp/triton-server [--out FILE]

The checkout is only read: the test files named in TESTS and their `test_models` are
copied into a temporary folder beside pbserve's shims (openai_shims/): `tests/utils.py`
(Triton's `setup_server`, `setup_fastapi_app` and `OpenAIServer`, each starting pbserve
with --openai-port instead of Triton's in-process server and FastAPI app),
`tests/conftest.py` (the fixtures, with no vLLM or TensorRT-LLM to find: backend None,
model mock_llm) and `fastapi/testclient.py` (a TestClient that sends over HTTP). The
tests themselves run unchanged. TestModelControlCLIOptions drives Triton's own main.py
and its messages, and TestModelManagementInference needs a real LLM: both are left out.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = ("test_observability.py", "test_model_management.py")
DESELECT = ("TestModelControlCLIOptions", "TestModelManagementInference")


def run(server_repo: Path, work: Path) -> list[tuple[str, str, str]]:
    source = server_repo / "python" / "openai" / "tests"
    shutil.copytree(HERE / "openai_shims", work, dirs_exist_ok=True)
    for name in TESTS:
        shutil.copy(source / name, work / "tests" / name)
    shutil.copytree(source / "test_models", work / "tests" / "test_models")
    report = work / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--junitxml", str(report), "-k",
                    " and ".join(f"not {name}" for name in DESELECT),
                    *(f"tests/{name}" for name in TESTS)],
                   cwd=work, env={"PYTHONPATH": str(work), "PATH": "/usr/bin:/bin"},
                   check=False)
    rows = []
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            rows.append((name, "FAIL", (failure.get("message") or "")[:110]))
        elif skipped is not None:
            rows.append((name, "skip", (skipped.get("message") or "")[:110]))
        else:
            rows.append((name, "pass", ""))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-repo", type=Path, required=True)
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="triton-openai-") as work:
        rows = run(args.server_repo, Path(work))
    lines = ["| test | result | note |", "| --- | --- | --- |"]
    lines += [f"| {name} | {result} | {note.replace('|', '/')} |"
              for name, result, note in rows]
    counts = {r: sum(1 for row in rows if row[1] == r) for r in ("pass", "FAIL", "skip")}
    lines.append(f"\n{counts['pass']} passed, {counts['FAIL']} failed, "
                 f"{counts['skip']} skipped")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
