"""The results table and its summary line."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from result import FAIL, PASS, SKIP, Result


def table(rows: list[Result]) -> str:
    width = max([len(r.case) for r in rows] + [4])
    lines = [f"{'case':<{width}}  result  reason", f"{'-' * width}  ------  ------"]
    lines += [f"{r.case:<{width}}  {r.status:<6}  {r.reason}".rstrip() for r in rows]
    return "\n".join(lines)


def summary(rows: list[Result]) -> str:
    counts = {s: sum(r.status == s for r in rows) for s in (PASS, FAIL, SKIP)}
    return f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"


def finish(text: str, out: Path | None, work: Path, keep: bool) -> None:
    """Print the report (and write it to `out`), then remove the work folder unless kept."""
    print(text)
    if out:
        out.write_text(text)
    if keep:
        print(f"work folder: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
