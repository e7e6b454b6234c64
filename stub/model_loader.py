"""Import a user's model.py by path, as Triton's stub does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_model_module(model_path: str) -> ModuleType:
    """Import `<model>/<version>/<file>.py` as module `<version>.<stem>`-like name.

    The version directory and the model directory go on `sys.path` first, so that a
    model split over several files imports its siblings as in Triton.
    """
    path = Path(model_path)
    if path.suffix != ".py":
        raise ImportError(f"model file '{path}' must be a .py file")
    version_dir, model_dir = path.parent, path.parent.parent
    for entry in (str(version_dir), str(model_dir)):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    name = f"pbserve_model_{version_dir.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import model file '{path}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def model_class(module: ModuleType) -> type:
    cls = getattr(module, "TritonPythonModel", None)
    if cls is None:
        raise AttributeError(
            f"model file '{module.__file__}' does not define class 'TritonPythonModel'")
    if not hasattr(cls, "execute"):
        raise AttributeError("Python model must implement the `execute` method")
    return cls
