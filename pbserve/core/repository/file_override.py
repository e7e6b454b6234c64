"""A model loaded from files sent with its load request, as Triton's model file override.

A load request (HTTP `POST /v2/repository/models/{m}/load`, gRPC `RepositoryModelLoad`,
or `pb_utils.load_model` from a model) may carry `file:<path>` parameters, each the bytes
of one file of a model directory (`file:1/model.py`), with its `config` as JSON. The
model is then loaded from those files alone, written to a fresh private directory,
whether or not a repository holds a model of that name. The directory is removed when
the model is unloaded or reloaded, and when the load fails; one that a killed server
left is removed when the next server starts.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from pbserve.errors import invalid_arg
from shm.names import process_alive

FILE_PREFIX = "file:"
# Errors a path the client chose causes (the rest, a full disk say, are the server's).
_CLIENT_PATH_ERRORS = frozenset((errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR,
                                 errno.EEXIST, errno.EINVAL))
_DIR_PREFIX = "pbserve-model-"  # then the server's pid, "-", and mkdtemp's random part


def write_override(config: str | None, files: dict[str, bytes]) -> Path:
    """A new directory holding `files` laid out as a model directory; INVALID_ARG with
    Triton's words for a request Triton refuses (no config, a path leaving the
    directory, a file where a directory must be, content that is not bytes)."""
    if not config:
        raise invalid_arg("Load parameter 'config' must be specified for model file override")
    root = Path(tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-")).resolve()
    try:
        for key, content in files.items():
            _write_one(root, key, content)
    except BaseException:
        remove_override(root)
        raise
    return root


def _write_one(root: Path, key: str, content: bytes) -> None:
    if not key.startswith(FILE_PREFIX):
        raise invalid_arg(f"unexpected load parameter '{key}': expected 'config' or "
                          f"'{FILE_PREFIX}<path>'")
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise invalid_arg(f"File parameter '{key}' must have bytes type for its value")
    if "\0" in key:  # no file name holds one (the OS would refuse it: a ValueError)
        shown = key.replace("\0", "\\0")
        raise invalid_arg(f"Invalid file parameter '{shown}': a path may not contain a "
                          f"NUL character")
    # Lexically normalized ("a/../b" -> "b"): nothing in the fresh directory is a link.
    target = Path(os.path.normpath(root / key[len(FILE_PREFIX):]))
    if root not in target.parents:
        raise invalid_arg(f"Invalid file parameter '{key}' with normalized path '{target}' "
                          f"must stay within model directory.")
    try:
        _write_file(key, target, content)
    except OSError as exc:
        if exc.errno not in _CLIENT_PATH_ERRORS:
            raise
        raise invalid_arg(f"Invalid file parameter '{key}': {exc.strerror}") from None


def _write_file(key: str, target: Path, content: bytes) -> None:
    if any(p.exists() and not p.is_dir() for p in target.parents):
        raise invalid_arg(f"Invalid file parameter '{key}', directory has been created as "
                          f"a file")
    if target.is_dir():
        raise invalid_arg(f"Invalid file parameter '{key}', file has been created as a "
                          f"directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)


def remove_override(directory: Path | None) -> None:
    """Remove a directory `write_override` made (None: nothing to do)."""
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def sweep_dead_overrides() -> list[Path]:
    """Remove the override directories of servers that are gone (killed ones)."""
    removed = []
    for directory in Path(tempfile.gettempdir()).glob(_DIR_PREFIX + "*-*"):
        pid = directory.name[len(_DIR_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            remove_override(directory)
            removed.append(directory)
    return removed
