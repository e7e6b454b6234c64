"""A Python error as Triton's stub words it (pybind11's `error_already_set::what()`):
`Type: message`, then `\\n\\nAt:\\n` and a `  <file>(<line>): <function>` line per frame,
innermost first. Clients and tests match on these lines."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import traceback

import backend_utils
import shm
import stub

# Frames of pbserve's own code and of asyncio stand for Triton's C++ (which has none).
_HIDDEN = tuple(os.path.dirname(os.path.abspath(package.__file__)) + os.sep
                for package in (stub, backend_utils, shm, asyncio, concurrent.futures))


class StubError(Exception):
    """An error of the stub itself, not raised through model code (Triton's C++
    PythonBackendException): its text is the message alone."""


def describe(exc: BaseException) -> str:
    """Triton's text for `exc` (a SyntaxError says where, as Python prints it)."""
    if isinstance(exc, StubError):
        return str(exc)
    if isinstance(exc, SyntaxError):
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    else:
        text = f"{type(exc).__name__}: {exc}"
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(frame.filename).startswith(_HIDDEN)]
    if not frames:
        return text
    return text + "\n\nAt:\n" + "".join(
        f"  {frame.filename}({frame.lineno}): {frame.name}\n" for frame in reversed(frames))
