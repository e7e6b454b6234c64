"""`EXECUTION_ENV_PATH`: the Python environment a model's stubs run in.

Triton's Python backend reads this model config parameter: a directory holding a
Python environment, or a conda-pack `.tar.gz` that it unpacks once (again when the
archive changes), with `$$TRITON_MODEL_DIRECTORY` replaced by the model's directory.
Here the environment's `bin/python` runs `python -m stub`; pbserve's own packages
reach it through PYTHONPATH (`stub_process.stub_environment`), so the environment
only needs numpy and posix-ipc. See docs/model_environments.md.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pbserve.private_dir import UntrustedDirectory, private_dir
from pbserve.core.repository.env_check import check_stub_packages
from pbserve.errors import invalid_arg

ENV_PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIR_VARIABLE = "$$TRITON_MODEL_DIRECTORY"
ARCHIVE_SUFFIX = ".tar.gz"
_INTERPRETERS = ("bin/python", "bin/python3")


def stub_python(cfg: mc.ModelConfig, model_dir: Path) -> str | None:
    """The interpreter for the model's stubs; None (the server's own) when the config
    names no environment. Unpacks an archive and checks that the environment holds what
    the stub imports (env_check.py; blocking: call it off the event loop)."""
    if ENV_PARAMETER not in cfg.parameters:
        return None
    path = cfg.parameters[ENV_PARAMETER].string_value.replace(MODEL_DIR_VARIABLE,
                                                              str(model_dir))
    if not path:
        return None
    env = Path(path)
    if path.endswith(ARCHIVE_SUFFIX):
        if not env.is_file():
            raise invalid_arg(f"{ENV_PARAMETER} '{path}' of model '{cfg.name}' does not exist")
        env = unpacked(env)
    elif not env.is_dir():
        raise invalid_arg(f"{ENV_PARAMETER} '{path}' of model '{cfg.name}' is neither a "
                          f"directory nor a {ARCHIVE_SUFFIX} archive")
    for name in _INTERPRETERS:
        if os.access(env / name, os.X_OK):
            check_stub_packages(str(env / name), path, cfg.name)
            return str(env / name)
    raise invalid_arg(f"Path {env / _INTERPRETERS[0]} does not exist. The Python environment "
                      f"of model '{cfg.name}' should contain a '{_INTERPRETERS[0]}' interpreter.")


def unpacked(archive: Path) -> Path:
    """Where `archive` is unpacked: `$TMPDIR/pbserve_env_<uid>/<path hash>-<mtime>-<size>`,
    shared by servers and unpacked once per version of the archive. Unpacking goes to a
    scratch directory renamed into place, so a half-unpacked environment is never used;
    earlier versions of the same archive are removed."""
    stat = archive.stat()
    root = Path(tempfile.gettempdir()) / f"pbserve_env_{os.getuid()}"
    try:
        private_dir(root)  # one another user made could hold their own bin/python
    except UntrustedDirectory as err:
        raise invalid_arg(f"cannot unpack {ENV_PARAMETER} archive '{archive}': {err}") from None
    digest = hashlib.sha256(str(archive.resolve()).encode()).hexdigest()[:16]
    target = root / f"{digest}-{stat.st_mtime_ns}-{stat.st_size}"
    if target.is_dir():
        return target
    scratch = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=root))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            _extract(tar, scratch)
        os.rename(scratch, target)
    except OSError:
        if not target.is_dir():  # not another server winning the rename: a real failure
            raise
    except (tarfile.TarError, EOFError, zlib.error) as err:  # a damaged archive
        raise invalid_arg(f"failed to unpack {ENV_PARAMETER} archive '{archive}': {err}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for old in root.glob(f"{digest}-*"):
        if old != target:
            shutil.rmtree(old, ignore_errors=True)
    return target


def _extract(tar: tarfile.TarFile, destination: Path) -> None:
    """No entry may land outside `destination` (links may point anywhere: conda-pack and
    venv archives hold absolute symlinks to their interpreter). That check is tarfile's
    "tar" filter; a Python without it cannot unpack such an archive safely."""
    if not hasattr(tarfile, "tar_filter"):
        raise invalid_arg(
            f"unpacking an {ENV_PARAMETER} archive safely needs Python 3.10.12+ or 3.11.4+ "
            f"(tarfile filters); unpack it yourself and point {ENV_PARAMETER} at the "
            f"directory")
    tar.extractall(destination, filter="tar")
