"""A Python error as Triton's stub words it (pybind11's `error_already_set::what()`):
`Type: message`, then `\\n\\nAt:\\n` and a `  <file>(<line>): <function>` line per frame,
innermost first. Clients and tests match on these lines."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import os
import traceback

import backend_utils
import shm
import stub

# Frames of pbserve's own code and of asyncio stand for Triton's C++ (which has none);
# the import machinery's (importlib, `<frozen importlib._bootstrap>`) are noise before
# the user's model.py line an import failed at.
_HIDDEN = tuple(os.path.dirname(os.path.abspath(package.__file__)) + os.sep
                for package in (stub, backend_utils, shm, asyncio, concurrent.futures,
                                importlib))
_FROZEN = "<frozen "


class StubError(Exception):
    """An error of the stub itself, not raised through model code (Triton's C++
    PythonBackendException): its text is the message alone."""


def describe(exc: BaseException) -> str:
    """Triton's text for `exc`. A SyntaxError's first line is Triton's
    (`SyntaxError: expected ':' (model.py, line 7)`), then where it is, as Python
    prints it (the file's full path, the line, a caret)."""
    if isinstance(exc, StubError):
        return str(exc)
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError):
        where = _syntax_error_place(exc)
        text += ("\n" + where) if where else ""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not _hidden(frame.filename)]
    if not frames:
        return text
    return text + "\n\nAt:\n" + "".join(
        f"  {frame.filename}({frame.lineno}): {frame.name}\n" for frame in reversed(frames))


def _hidden(filename: str) -> bool:
    return filename.startswith(_FROZEN) or os.path.abspath(filename).startswith(_HIDDEN)


def _syntax_error_place(exc: SyntaxError) -> str:
    """`  File "<path>", line N` with the line and its caret: Python's lines for `exc`
    but the last (`SyntaxError: <msg>`, which Triton's first line says already)."""
    lines = traceback.format_exception_only(type(exc), exc)
    last = next((i for i, line in enumerate(lines)
                 if line.startswith(f"{type(exc).__name__}:")), len(lines))
    return "".join(lines[:last]).rstrip()
