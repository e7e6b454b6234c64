"""Python-based backends (Triton's backend/docs/python_based_backends.md): a model whose
config names `backend: "<name>"` runs `<backend-directory>/<name>/model.py` with its own
config, version folder and files; a model.py in the model's own folders comes first."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as http
from tritonclient.utils import InferenceServerException

from pbserve import model_backends as backends
from pbserve.core.config.model_config import complete_defaults, parse_model_config
from pbserve.testing import running_server

# A backend that scales its input by the number in its model's version folder
# (`factor.txt`), names itself in an output, and declares its tensors by
# auto_complete_config when the config has none.
SCALE_BACKEND = '''
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        if not config.as_dict()["input"]:
            config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [-1]})
            config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]})
            config.add_output({"name": "WHO", "data_type": "TYPE_STRING", "dims": [1]})
        return config

    def initialize(self, args):
        folder = os.path.join(args["model_repository"], args["model_version"])
        assert pb_utils.get_model_dir() == folder, (pb_utils.get_model_dir(), folder)
        with open(os.path.join(folder, "factor.txt")) as f:
            self.factor = float(f.read())
        self.who = f"{__name__}:{os.path.dirname(__file__)}:{args['model_name']}"
        assert os.path.dirname(__file__) in sys.path

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", (x * self.factor).astype(np.float32)),
                pb_utils.Tensor("WHO", np.array([self.who.encode()], dtype=object))]))
        return out
'''


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _model(repo: Path, name: str, config: str, factor: float, version: str = "1") -> Path:
    _write(repo / name / "config.pbtxt", config)
    _write(repo / name / version / "factor.txt", str(factor))
    return repo / name


def _infer(client, model: str, x: np.ndarray) -> tuple[np.ndarray, str]:
    i = http.InferInput("X", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    r = client.infer(model, [i])
    return r.as_numpy("Y"), r.as_numpy("WHO")[0].decode()


@pytest.fixture
def layout(tmp_path: Path):
    backend_dir, repo = tmp_path / "backends", tmp_path / "repo"
    _write(backend_dir / "scale" / "model.py", SCALE_BACKEND)
    _model(repo, "double", 'backend: "scale"', 2)
    _model(repo, "triple", '''
        backend: "scale"
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] },
                 { name: "WHO" data_type: TYPE_STRING dims: [ 1 ] } ]
        instance_group [ { count: 2 kind: KIND_CPU } ]''', 3)
    # its own model.py in its version folder wins over the backend directory's
    own = _model(repo, "own", 'backend: "scale"', 5)
    _write(own / "1" / "model.py", SCALE_BACKEND.replace("self.factor)", "self.factor + 1)"))
    return backend_dir, repo


def test_a_backend_serves_two_models_with_their_own_configs_and_files(layout) -> None:
    backend_dir, repo = layout
    x = np.arange(3, dtype=np.float32)
    with running_server(repo, args=["--backend-directory", str(backend_dir)]) as server:
        client = server.http_client()
        y, who = _infer(client, "double", x)
        assert y.tolist() == [0, 2, 4]
        assert who == f"model:{backend_dir / 'scale'}:double"
        y, who = _infer(client, "triple", x)
        assert y.tolist() == [0, 3, 6] and who.endswith(":triple")
        y, who = _infer(client, "own", x)
        assert y.tolist() == [1, 6, 11]
        assert who == f"model:{repo / 'own' / '1'}:own"
        # auto_complete_config of the backend's model.py filled in "double"'s tensors
        cfg = client.get_model_config("double")
        assert [i["name"] for i in cfg["input"]] == ["X"]
        assert cfg["backend"] == "scale"
        assert client.get_model_metadata("double")["platform"] == "scale"
        stats = client.get_inference_statistics("triple")["model_stats"][0]
        assert stats["inference_count"] == 1


def test_a_backend_found_nowhere_keeps_tritons_error(layout) -> None:
    backend_dir, repo = layout
    _model(repo, "lost", 'backend: "vllm"', 1)
    with running_server(repo, args=["--backend-directory", str(backend_dir)],
                        ready_path="/v2/health/live") as server:
        client = server.http_client()
        assert client.is_model_ready("double")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["lost"]["reason"] == (
            "unable to find backend library for backend 'vllm', try specifying runtime on "
            "the model configuration.")


def test_without_the_flag_the_default_backend_directory_is_tritons(layout) -> None:
    _, repo = layout
    cfg = parse_model_config('backend: "scale"')
    assert backends.DEFAULT_BACKEND_DIRECTORY == "/opt/tritonserver/backends"
    with pytest.raises(Exception, match="unable to find backend library for backend 'scale'"):
        complete_defaults(cfg, "double", repo / "double")
    # the model whose own version folder has a model.py needs no backend directory
    assert complete_defaults(cfg, "own", repo / "own").backend == "scale"


def test_a_backend_importing_a_missing_package_fails_only_its_models(layout) -> None:
    backend_dir, repo = layout
    _write(backend_dir / "broken" / "model.py", "import pbserve_no_such_package\n")
    _model(repo, "broken_model", 'backend: "broken"', 1)
    with running_server(repo, args=["--backend-directory", str(backend_dir)],
                        ready_path="/v2/health/live") as server:
        client = server.http_client()
        assert client.is_model_ready("double") and not client.is_model_ready("broken_model")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert "No module named 'pbserve_no_such_package'" in index["broken_model"]["reason"]
        with pytest.raises(InferenceServerException):
            _infer(client, "broken_model", np.zeros(1, np.float32))


def test_missing_package_message_names_what_to_install() -> None:
    text = backends.missing_package_message(
        "onnxruntime", "onnxruntime", ModuleNotFoundError("No module named 'onnxruntime'"))
    assert text == ("the 'onnxruntime' backend needs the Python package 'onnxruntime', which "
                    "cannot be imported (ModuleNotFoundError: No module named 'onnxruntime'): "
                    "pip install 'pbserve[onnx]' (or pip install onnxruntime)")
    assert "pip install 'pbserve[torch]'" in backends.missing_package_message("pytorch", "torch")


def test_search_order(tmp_path: Path) -> None:
    paths = backends.search_paths("onnxruntime", tmp_path / "m", "1", tmp_path / "bd")
    assert paths == [tmp_path / "m" / "1", tmp_path / "m",
                     backends.BUILTIN_DIRECTORY / "onnxruntime",
                     tmp_path / "bd" / "onnxruntime"]
    assert backends.search_paths("x", None, None, tmp_path / "bd") == [tmp_path / "bd" / "x"]


@pytest.mark.parametrize("text, files, backend, platform, filename", [
    ("", ["model.onnx"], "onnxruntime", "onnxruntime_onnx", "model.onnx"),
    ("", ["model.pt"], "pytorch", "pytorch_libtorch", "model.pt"),
    ("", ["model.onnx", "model.py"], "onnxruntime", "onnxruntime_onnx", "model.onnx"),
    ('platform: "onnxruntime_onnx"', [], "onnxruntime", "onnxruntime_onnx", "model.onnx"),
    ('backend: "onnxruntime"', [], "onnxruntime", "onnxruntime_onnx", "model.onnx"),
    ('platform: "pytorch_libtorch" default_model_filename: "net.pt"', [], "pytorch",
     "pytorch_libtorch", "net.pt"),
    ('default_model_filename: "model.pt"', [], "pytorch", "pytorch_libtorch", "model.pt"),
    ("", ["model.py"], "python", "", "model.py"),
])
def test_the_backend_comes_from_the_config_or_the_first_version_folder(
        tmp_path: Path, text, files, backend, platform, filename) -> None:
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)
    (model / "2").mkdir()
    for name in files:
        (model / "1" / name).write_text("")
    (model / "2" / "model.pt").write_text("")  # only the first version folder counts
    cfg = complete_defaults(parse_model_config(text), "m", model)
    assert (cfg.backend, cfg.platform, cfg.default_model_filename) == (backend, platform,
                                                                       filename)


def test_a_folder_named_model_onnx_does_not_name_the_backend(tmp_path: Path) -> None:
    (tmp_path / "m" / "1" / "model.onnx").mkdir(parents=True)
    with pytest.raises(Exception, match="Could not determine backend for model 'm'"):
        complete_defaults(parse_model_config(""), "m", tmp_path / "m")
