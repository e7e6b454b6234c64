"""Python-based backends: where a model whose config names `backend: "<name>"` (other
than "python") finds the `model.py` that serves it.

Triton runs such a model with the `TritonPythonModel` of `<backend-directory>/<name>/
model.py`, giving it the model's own config, version folder and files. Triton's core
looks for that model.py in the model's version folder, then in the model's folder, then
in the backend directory; pbserve adds its built-in backends (this package: `onnxruntime`,
`openvino`, `pytorch`) just before the backend directory. See docs/backends.md.
"""

from __future__ import annotations

from pathlib import Path

PYTHON_BACKEND = "python"
BACKEND_MODEL_FILENAME = "model.py"
DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"  # tritonserver's default
BUILTIN_DIRECTORY = Path(__file__).resolve().parent
BUILTIN_BACKENDS = ("onnxruntime", "openvino", "pytorch")

# What each built-in backend's stubs import: their zygote imports it first, so that they
# share its pages (stub/zygote.py --preload).
FRAMEWORKS = {"onnxruntime": ("onnxruntime",), "openvino": ("openvino",),
              "pytorch": ("torch",)}

# The extra that installs what a built-in backend imports: package -> pip argument.
EXTRAS = {"onnxruntime": "pbserve[onnx]", "openvino": "pbserve[openvino]",
          "torch": "pbserve[torch]"}

def search_paths(backend: str, model_dir: Path | None, version: str | None,
                 backend_directory: Path = Path(DEFAULT_BACKEND_DIRECTORY)) -> list[Path]:
    """The folders searched for `<backend>`'s model.py, first match wins
    (`backend_directory`: --backend-directory's)."""
    paths: list[Path] = []
    if model_dir is not None:
        if version is not None:
            paths.append(Path(model_dir) / version)
        paths.append(Path(model_dir))
    if backend in BUILTIN_BACKENDS:
        paths.append(BUILTIN_DIRECTORY / backend)
    if backend and "/" not in backend and backend not in (".", ".."):
        paths.append(Path(backend_directory) / backend)
    return paths


def find_backend_model(backend: str, model_dir: Path | None, version: str | None = None,
                       backend_directory: Path = Path(DEFAULT_BACKEND_DIRECTORY)
                       ) -> Path | None:
    """The model.py serving a model of `backend` (not "python"); None if there is none."""
    for folder in search_paths(backend, model_dir, version, backend_directory):
        candidate = folder / BACKEND_MODEL_FILENAME
        if candidate.is_file():
            return candidate
    return None


def backend_exists(backend: str, model_dir: Path | None,
                   backend_directory: Path = Path(DEFAULT_BACKEND_DIRECTORY)) -> bool:
    """Whether some version of the model in `model_dir` would find a model.py."""
    if find_backend_model(backend, model_dir, None, backend_directory) is not None:
        return True
    if model_dir is None:
        return False
    try:
        return any((p / BACKEND_MODEL_FILENAME).is_file()
                   for p in Path(model_dir).iterdir() if p.is_dir())
    except OSError:
        return False


def missing_package_message(backend: str, package: str, error: BaseException | None = None
                            ) -> str:
    """What a built-in backend says when the package it runs on cannot be imported."""
    extra = EXTRAS.get(package)
    how = f"pip install '{extra}' (or pip install {package})" if extra \
        else f"pip install {package}"
    cause = f" ({type(error).__name__}: {error})" if error is not None else ""
    return (f"the '{backend}' backend needs the Python package '{package}', which cannot be "
            f"imported{cause}: {how}")


def framework_modules(backend_path: str) -> tuple[str, ...]:
    """The frameworks the stub of a model served by `backend_path` (a Python-based
    backend's model.py; "" for a Python model) will import: a built-in backend's, or ()
    for any other (what a user's backend or model imports is its own affair)."""
    if not backend_path:
        return ()
    folder = Path(backend_path).resolve().parent
    if folder.parent != BUILTIN_DIRECTORY:
        return ()
    return FRAMEWORKS.get(folder.name, ())
