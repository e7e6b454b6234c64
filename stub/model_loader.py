"""Import a user's model.py as Triton's stub does.

Triton appends the version folder and the model folder to `sys.path` (in that order) and
imports `<model>/<version>/<file>.py` as the module `<version>.<file stem>` (`1.model`),
inside the package `<version>`. So a model split over several files imports its siblings
every way: `from . import helpers`, `from .helpers import x`, `import helpers`.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_model_module(model_path: str) -> ModuleType:
    """Import `<model>/<version>/<file>.py` as module `<version>.<stem>`."""
    path = Path(model_path)
    if path.suffix != ".py":
        raise ImportError(
            f"Model name must end with '.py'. Model name is \"{path.name}\".")
    version_dir, model_dir = path.parent, path.parent.parent
    for entry in (str(version_dir), str(model_dir)):
        if entry not in sys.path:
            sys.path.append(entry)
    _import_version_package(version_dir.name, model_dir)
    return importlib.import_module(f"{version_dir.name}.{path.stem}")


def import_backend_module(backend_path: str) -> ModuleType:
    """A Python-based backend's model.py, as Triton's stub imports it: its folder is
    appended to `sys.path` and the file is the top-level module of its stem (`model`).
    The file is loaded by its path, so that another `model` module earlier on `sys.path`
    is never taken for it."""
    path = Path(backend_path)
    if path.suffix != ".py":
        raise ImportError(
            f"Model name must end with '.py'. Model name is \"{path.name}\".")
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the backend's model file '{path}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[path.stem]
        raise
    return module


def _import_version_package(version: str, model_dir: Path) -> None:
    """The package `<version>` from this model's folder only. Left to `sys.path`, a folder
    of that name anywhere before the model folder (the working directory) would be found
    first, or merged into it as one namespace package."""
    if version in sys.modules:
        return
    spec = importlib.machinery.PathFinder.find_spec(version, [str(model_dir)])
    if spec is None:
        raise ImportError(f"cannot import the version folder '{model_dir / version}'")
    package = importlib.util.module_from_spec(spec)
    package.__path__ = [str(model_dir / version)]  # a namespace path would search sys.path
    sys.modules[version] = package
    try:
        if spec.loader is not None:
            spec.loader.exec_module(package)
    except BaseException:
        del sys.modules[version]
        raise


def model_class(module: ModuleType) -> type:
    cls = getattr(module, "TritonPythonModel", None)
    if cls is None:
        raise AttributeError(
            f"model file '{module.__file__}' does not define class 'TritonPythonModel'")
    if not hasattr(cls, "execute"):
        raise AttributeError("Python model must implement the `execute` method")
    return cls
