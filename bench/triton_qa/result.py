"""One row of the table."""

from __future__ import annotations

from dataclasses import dataclass

PASS, FAIL, SKIP = "pass", "FAIL", "skip"


@dataclass
class Result:
    case: str
    status: str
    reason: str = ""
