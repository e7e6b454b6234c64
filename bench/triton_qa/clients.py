"""Run a case's client (a pytest file or a plain script) and turn its outcome into rows."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from result import FAIL, PASS, SKIP, Result
from spec import Client

TIMEOUT_S = int(os.environ.get("TRITON_QA_CLIENT_TIMEOUT", "180"))  # one client's run


def run(client: Client, case: str, cwd: Path, env: dict[str, str], log: Path) -> list[Result]:
    """Run `client` in `cwd`; its output goes to `log`; one row per test (or per script)."""
    full_env = {**os.environ, **env, **client.env}
    if client.pytest:  # rows are named case[:label]::Class::test
        label = f"{case}:{client.label}" if client.label else case
        return _run_pytest(client, label, cwd, full_env, log)
    label = f"{case}:{client.label or Path(client.argv[0]).name}"
    status, text = _call([sys.executable, *client.argv], cwd, full_env, log)
    if status == 0:
        return [Result(label, PASS)]
    return [Result(label, FAIL, first_error(text) or f"exit status {status}")]


def _run_pytest(client: Client, label: str, cwd: Path, env: dict[str, str],
                log: Path) -> list[Result]:
    target = client.argv[0]
    junit = log.with_suffix(".xml")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
            f"--junitxml={junit}", target, *client.argv[1:]]
    file = target.split("::")[0]
    for test in client.deselect:
        argv += ["--deselect", f"{file}::{test}"]
    status, text = _call(argv, cwd, env, log)
    rows = [Result(f"{label}::{t}", SKIP, why) for t, why in client.deselect.items()]
    tests = _junit(junit, label)
    if not tests:
        reason = first_error(text) or f"pytest exit status {status}, no test report"
        return rows + [Result(label, FAIL, reason)]
    if status not in (0, 5) and all(r.status != FAIL for r in tests):
        tests.append(Result(label, FAIL, first_error(text) or f"pytest exit status {status}"))
    return rows + tests


def _call(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, str]:
    with open(log, "wb") as out:
        try:
            status = subprocess.run(argv, cwd=cwd, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, timeout=TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            status = -1
            out.write(f"\n*** client timed out after {TIMEOUT_S} s\n".encode())
    return status, log.read_text(errors="replace")


def _junit(path: Path, label: str) -> list[Result]:
    if not path.exists():
        return []
    rows = []
    for case in ET.parse(path).iter("testcase"):
        name = f"{label}::{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skipped = case.find("skipped")
        if problem is not None:
            text = problem.text or problem.get("message", "")
            rows.append(Result(name, FAIL, first_error(text)))
        elif skipped is not None:
            rows.append(Result(name, SKIP, "skipped by the test: " + skipped.get("message", "")))
        else:
            rows.append(Result(name, PASS))
    return rows


MARKERS = ("Error", "Exception", "assert", "timed out")


def first_error(text: str) -> str:
    """The most telling line of a failure's output: pytest's first `E ` line naming an
    error, else the last line naming one, else the last non-empty line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("E ") and any(m in line for m in MARKERS):
            return short(line[1:].strip())
    for line in reversed(lines):
        if any(m in line for m in MARKERS) and not line.startswith("File "):
            return short(line)
    return short(lines[-1]) if lines else ""


def short(line: str, width: int = 160) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."
