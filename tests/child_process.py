"""Running code in a fresh interpreter: the other side of a shared-memory test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_py(code: str, *args, timeout: float = 30) -> str:
    """Run `code` in a fresh interpreter (killed on timeout); its stdout."""
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], check=False,
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
