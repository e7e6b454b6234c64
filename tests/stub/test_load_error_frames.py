"""A model that fails to load is told to clients (repository index, load API) and in the
server's log with its own model.py frames and the error's text, never pbserve's paths."""

from __future__ import annotations

import logging
import os
import re
import textwrap
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

import backend_utils
import pbserve
import shm
import stub
from pbserve.core.instances.stub_stdio import StubOutput
from pbserve.testing import running_server

# pbserve's own code: none of it may be named in what a client is told
OWN = [str(Path(package.__file__).resolve().parent) + os.sep
       for package in (pbserve, stub, backend_utils, shm)]

CONFIG = """
backend: "python"
input [{ name: "X", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]
"""
MODELS = {
    "init_raises": """
        def helper():
            raise RuntimeError("no weights here")


        class TritonPythonModel:
            def initialize(self, args):
                helper()

            def execute(self, requests):
                return []
        """,
    "auto_complete_raises": """
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(config):
                raise ValueError("cannot complete")

            def execute(self, requests):
                return []
        """,
    "import_fails": """
        import no_such_package_for_pbserve_tests


        class TritonPythonModel:
            def execute(self, requests):
                return []
        """,
}


def assert_no_own_paths(text: str) -> None:
    for path in OWN:
        assert path not in text, text


@pytest.fixture(scope="module")
def failed(tmp_path_factory) -> dict:
    """Each model's load error: the load API's, the repository index's, the log's."""
    repo = tmp_path_factory.mktemp("repo")
    for name, source in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG)
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(source))
    log_path = tmp_path_factory.mktemp("log") / "server.log"
    errors = {}
    with running_server(repo, args=["--model-control-mode", "explicit"],
                        log_path=log_path) as server:
        client = server.http_client()
        for name in MODELS:
            with pytest.raises(InferenceServerException) as raised:
                client.load_model(name)
            errors[name] = {"load": raised.value.message()}
        for model in client.get_model_repository_index():
            errors[model["name"]]["index"] = model["reason"]
        log = server.log_text()
    for name in MODELS:  # the log's entry: up to the next line with a heading
        errors[name]["log"] = re.search(rf"load failed for model '{name}'.*?(?=\n[IWE]\d{{4}} |\Z)",
                                        log, re.DOTALL)[0]
    return errors


@pytest.mark.parametrize("where", ["load", "index", "log"])
@pytest.mark.parametrize("name, says", [
    ("init_raises", ["RuntimeError: no weights here\n\nAt:\n",
                     "init_raises/1/model.py(3): helper\n",
                     "init_raises/1/model.py(8): initialize\n"]),
    ("auto_complete_raises", ["auto_complete_config: ValueError: cannot complete\n\nAt:\n",
                              "auto_complete_raises/1/model.py(5): auto_complete_config\n"]),
    ("import_fails", ["ModuleNotFoundError: No module named "
                      "'no_such_package_for_pbserve_tests'\n\nAt:\n",
                      "import_fails/1/model.py(2): <module>\n"]),
])
def test_a_load_error_carries_the_models_frames_only(failed, where, name, says) -> None:
    text = failed[name][where]
    for part in says:
        assert part in text, text
    assert text.count("): ") == len(says) - 1, text  # no frame but the model's
    assert_no_own_paths(text)


def test_a_glog_line_of_the_stub_gets_one_heading(caplog) -> None:
    """pb_utils.Logger writes glog lines to stderr before the stub's log channel exists
    (auto-complete): the server logs them at their level, without that second heading."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    with caplog.at_level(logging.INFO, logger="pbserve.stub"):
        output = StubOutput("m_0", open(out_r, "rb", buffering=0), open(err_r, "rb", buffering=0))
        os.write(err_w, b"I1128 20:27:18.659269 14851 model.py:93] autofilled it\n"
                        b"E1128 20:27:18.659269 14851 model.py:94] broken\n"
                        b"a plain line\n")
        os.close(err_w)
        os.close(out_w)
        output.join(5.0)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "m_0] model.py:93] autofilled it"),
        (logging.ERROR, "m_0] model.py:94] broken"),
        (logging.WARNING, "m_0] a plain line")]
