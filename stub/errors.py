"""A Python error as Triton's stub words it (pybind11's `error_already_set::what()`):
`Type: message`, then `\\n\\nAt:\\n` and a `  <file>(<line>): <function>` line per frame,
innermost first. Clients and tests match on these lines."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import os
import traceback

import backend_utils
import shm
import stub


def _folder(path: str) -> str:
    return os.path.dirname(os.path.realpath(path)) + os.sep


# pbserve's own code: the stub's packages and the server's, installed next to them (the
# stub imports them through links, and need not be able to import the server's) ...
_OWN = tuple(_folder(package.__file__) for package in (stub, backend_utils, shm)) + (
    os.path.join(os.path.dirname(os.path.dirname(_folder(stub.__file__))), "pbserve", ""),)
# ... and asyncio's stand for Triton's C++ (which has no Python frames); the import
# machinery's (importlib, `<frozen importlib._bootstrap>`) are noise before the user's
# model.py line an import failed at.
_HIDDEN = _OWN + tuple(_folder(package.__file__)
                       for package in (asyncio, concurrent.futures, importlib))
_FROZEN = "<frozen "


# Triton's words for RESCHEDULE where no iterative sequence batcher takes the request back
RESCHEDULE_UNSUPPORTED = ("Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, "
                          "while the model is not configured to handle such a flag.")


class StubError(Exception):
    """An error of the stub itself, not raised through model code (Triton's C++
    PythonBackendException): its text is the message alone."""


def describe(exc: BaseException, frames: bool = True) -> str:
    """Triton's text for `exc`. A SyntaxError's first line is Triton's
    (`SyntaxError: expected ':' (model.py, line 7)`), then where it is, as Python
    prints it (the file's full path, the line, a caret). `frames=False`: the first line
    alone (an error of a built-in backend, whose frames are all pbserve's and its
    libraries')."""
    if isinstance(exc, StubError):
        return str(exc)
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError):
        where = _syntax_error_place(exc)
        text += ("\n" + where) if where else ""
    if not frames:
        return text
    shown = [frame for frame in traceback.extract_tb(exc.__traceback__)
             if not _hidden(frame.filename)]
    if not shown:
        return text
    return text + "\n\nAt:\n" + "".join(
        f"  {frame.filename}({frame.lineno}): {frame.name}\n" for frame in reversed(shown))


def own_code(filename: str) -> bool:
    """Whether `filename` is pbserve's (the server's package, the stub, pb_utils, shm):
    a built-in backend's model.py is."""
    return _real(filename).startswith(_OWN)


def _hidden(filename: str) -> bool:
    return filename.startswith(_FROZEN) or _real(filename).startswith(_HIDDEN)


@functools.lru_cache(maxsize=256)
def _real(filename: str) -> str:
    return os.path.realpath(filename)


def _syntax_error_place(exc: SyntaxError) -> str:
    """`  File "<path>", line N` with the line and its caret: Python's lines for `exc`
    but the last (`SyntaxError: <msg>`, which Triton's first line says already)."""
    lines = traceback.format_exception_only(type(exc), exc)
    last = next((i for i, line in enumerate(lines)
                 if line.startswith(f"{type(exc).__name__}:")), len(lines))
    return "".join(lines[:last]).rstrip()
