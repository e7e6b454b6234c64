"""The results table and its summary line."""

from __future__ import annotations

from result import FAIL, PASS, SKIP, Result


def table(rows: list[Result]) -> str:
    width = max([len(r.case) for r in rows] + [4])
    lines = [f"{'case':<{width}}  result  reason", f"{'-' * width}  ------  ------"]
    lines += [f"{r.case:<{width}}  {r.status:<6}  {r.reason}".rstrip() for r in rows]
    return "\n".join(lines)


def summary(rows: list[Result]) -> str:
    counts = {s: sum(r.status == s for r in rows) for s in (PASS, FAIL, SKIP)}
    return f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
