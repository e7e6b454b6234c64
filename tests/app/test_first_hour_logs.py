"""What a new user meets in the first hour (issue 40), with real servers: a model.py that
does not import, an EXECUTION_ENV_PATH that lacks the stub's packages, the log of
loading, unloading, requests at --log-verbose 1, and a frontend's view of its workers."""

from __future__ import annotations

import re
import sysconfig
import venv
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from client_inputs import grpc_input, http_input
from ensemble_repo import ensemble, step, step_model
from pbserve.testing import RunningServer, running_nats, running_server
from polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
{extra}"""
GOOD = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import time
        time.sleep({sleep})

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests]
"""
SYNTAX_ERROR = """import numpy as np


class TritonPythonModel:
    def execute(self, requests)
        return []
"""
IMPORT_ERROR = """import numpy as np
import no_such_package_xyz


class TritonPythonModel:
    def execute(self, requests):
        return []
"""
AUTO_COMPLETE_RAISES = """class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        raise ValueError("no config for you")

    def execute(self, requests):
        return []
"""


def model(repo: Path, name: str, source: str, extra: str = "") -> Path:
    """A Python model `name` in `repo`: its model.py's path."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
    path = repo / name / "1" / "model.py"
    path.write_text(source)
    return path


def reasons(server: RunningServer) -> dict[str, str]:
    return {m["name"]: m.get("reason", "")
            for m in server.http_client().get_model_repository_index()}


# -- 5: a model.py that does not import ------------------------------------------------
def test_a_model_py_that_does_not_import_names_its_file_and_line_not_importlib(tmp_path):
    repo = tmp_path / "repo"
    bad = model(repo, "bad", SYNTAX_ERROR)
    missing = model(repo, "missing", IMPORT_ERROR)
    model(repo, "completer", AUTO_COMPLETE_RAISES)
    with running_server(repo, args=["--model-control-mode", "explicit", "--load-model", "*"],
                        log_path=tmp_path / "log", ready_path="/v2/health/live") as server:
        index = reasons(server)
        with pytest.raises(InferenceServerException) as loaded:
            server.http_client().load_model("bad")
        log = server.log_text()
    syntax = index["bad"]
    assert "SyntaxError: expected ':' (model.py, line 5)" in syntax, syntax
    assert f'File "{bad}", line 5' in syntax
    assert "def execute(self, requests)" in syntax
    assert "SyntaxError: expected ':' (model.py, line 5)" in loaded.value.message()
    assert "SyntaxError: expected ':' (model.py, line 5)" in log
    imported = index["missing"]
    assert "ModuleNotFoundError: No module named 'no_such_package_xyz'" in imported, imported
    assert f"{missing}(2): <module>" in imported
    for reason in (syntax, imported, loaded.value.message(), log):
        assert "importlib" not in reason and "<frozen" not in reason
        assert "auto_complete_config: ModuleNotFoundError" not in reason
        assert "auto_complete_config: File" not in reason
    # an error of the method itself still says where it came from
    assert "auto_complete_config: ValueError: no config for you" in index["completer"]


# -- 6: an EXECUTION_ENV_PATH without the stub's packages --------------------------------
def _environment(path: Path, packages: tuple[str, ...]) -> Path:
    """A venv that sees only `packages` of this Python's (through a .pth file)."""
    venv.create(path, with_pip=False, symlinks=True)
    purelib = Path(sysconfig.get_paths()["purelib"])
    shown = path.parent / f"{path.name}-packages"
    shown.mkdir()
    for name in packages:
        for entry in purelib.glob(f"{name}*"):
            if not entry.name.endswith(".dist-info"):
                (shown / entry.name).symlink_to(entry)
    site = path / "lib" / f"python{sysconfig.get_python_version()}" / "site-packages"
    (site / "shown.pth").write_text(f"{shown}\n")
    return path


def _env_parameter(env: Path) -> str:
    return 'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "%s" } }\n' % env


def test_an_execution_env_lacking_the_stubs_packages_names_them_and_how_to_add_them(
        tmp_path):
    no_ipc = _environment(tmp_path / "no_ipc", ("numpy",))
    bare = _environment(tmp_path / "bare", ())
    full = _environment(tmp_path / "full", ("numpy", "posix_ipc"))
    repo = tmp_path / "repo"
    model(repo, "no_ipc", GOOD.format(sleep=0), _env_parameter(no_ipc))
    model(repo, "bare", GOOD.format(sleep=0), _env_parameter(bare))
    model(repo, "full", GOOD.format(sleep=0), _env_parameter(full))
    with running_server(repo, log_path=tmp_path / "log", ready_path="/v2/health/live",
                        args=["--model-control-mode", "explicit", "--load-model", "*"]
                        ) as server:
        index = reasons(server)
        assert server.http_client().is_model_ready("full")  # a complete one runs
        with pytest.raises(InferenceServerException) as loaded:
            server.http_client().load_model("no_ipc")
        log = server.log_text()
    for reason in (index["no_ipc"], loaded.value.message()):
        assert (f"the execution environment '{no_ipc}' of model 'no_ipc' lacks the package "
                f"'posix_ipc' that pbserve's stub needs: pip install posix-ipc into it "
                f"({no_ipc}/bin/python -m pip install posix-ipc)") in reason, reason
    assert "lacks the packages 'posix_ipc', 'numpy'" in index["bare"]
    assert "pip install posix-ipc numpy" in index["bare"]
    assert "lacks the package 'posix_ipc'" in log
    assert "not healthy" not in log and "status None" not in log


# -- 10 (a, b): loaded once, unloaded as tritonserver says --------------------------------
def test_ensemble_steps_are_loaded_and_logged_once_and_unloads_are_logged(tmp_path):
    repo = tmp_path / "repo"
    step_model(repo, "s_identity", "identity", ["INPUT0"], ["OUTPUT0"])
    step_model(repo, "s_add", "add", ["IN"], ["OUT"])
    ensemble(repo, "chain", ["INPUT0"], ["OUTPUT0"], [
        step("s_identity", {"INPUT0": "INPUT0"}, {"OUTPUT0": "t1"}),
        step("s_add", {"IN": "t1"}, {"OUT": "t2"}),
        step("s_identity", {"INPUT0": "t2"}, {"OUTPUT0": "OUTPUT0"})])
    with running_server(repo, args=["--model-control-mode", "explicit", "--load-model", "*"],
                        log_path=tmp_path / "log") as server:
        server.http_client().unload_model("chain")
        wait_for(lambda: "successfully unloaded 'chain' version 1" in server.log_text(),
                 "the ensemble's unload to be logged")
    log = server.log_text()
    for name in ("s_identity", "s_add", "chain"):
        assert log.count(f"successfully loaded '{name}'") == 1, log
    for name in ("s_identity", "s_add"):  # at shutdown
        assert log.count(f"successfully unloaded '{name}' version 1") == 1, log


# -- 10 (d): --log-verbose 1 shows each request ------------------------------------------
def test_log_verbose_1_logs_each_request_as_tritonserver_and_level_0_does_not(tmp_path):
    repo = tmp_path / "repo"
    model(repo, "echo", GOOD.format(sleep=0))
    array = np.array([1.0], np.float32)
    with running_server(repo, args=["--log-verbose", "1"],
                        log_path=tmp_path / "log") as server:
        http, grpc = server.http_client(), server.grpc_client()
        http.infer("echo", [http_input("IN", array)])
        grpc.is_server_live()
        grpc.infer("echo", [grpc_input("IN", array)])
        wait_for(lambda: "Process for ModelInferHandler, rpc_ok=1" in server.log_text(),
                 "the gRPC infer to be logged")
        log = server.log_text()
        assert "HTTP request: 0 /v2/health/ready" in log  # running_server's polls
        assert "HTTP request: 2 /v2/models/echo/infer" in log
        assert "Process for ServerLive, rpc_ok=1, 0 step START" in log

        http.update_log_settings({"log_verbose_level": 0})
        before = server.log_text().count("HTTP request:")
        http.infer("echo", [http_input("IN", array)])
        grpc.infer("echo", [grpc_input("IN", array)])
        http.update_log_settings({"log_verbose_level": 2})  # read at level 0: not logged
        http.is_server_live()
        wait_for(lambda: "HTTP request: 0 /v2/health/live" in server.log_text(),
                 "level 2 to log requests again")
        after = server.log_text()
    assert after.count("HTTP request:") == before + 1
    assert after.count("Process for ModelInferHandler") == 1


# -- 10 (c): a frontend logs the workers it sees -----------------------------------------
def test_a_frontend_logs_workers_joining_and_leaving_with_their_models(tmp_path):
    repo = tmp_path / "repo"
    model(repo, "echo", GOOD.format(sleep=0))
    with running_nats(tmp_path / "nats.log") as nats:
        plane = ["--request-plane", nats.url, "--plane-heartbeat-secs", "1"]
        frontend = RunningServer([], plane, tmp_path / "frontend.log")
        worker = RunningServer([repo], [*plane, "--worker-name", "w1"], tmp_path / "w1.log")
        try:
            frontend.wait_ready()
            worker.wait_ready()
            wait_for(lambda: "worker 'w1' joined the request plane, serving: echo (version 1)"
                     in frontend.log_text(), "the frontend to log the worker", 30)
            worker.stop()
            wait_for(lambda: "worker 'w1' left the request plane (it served: echo)"
                     in frontend.log_text(), "the frontend to log the worker leaving", 30)
        finally:
            worker.stop()
            frontend.stop()
    assert frontend.log_text().count("worker 'w1' joined") == 1  # not per heartbeat


# -- 12: progress of a long start --------------------------------------------------------
def test_a_start_that_takes_a_while_logs_its_progress_and_the_slowest_model(tmp_path):
    repo = tmp_path / "repo"
    model(repo, "quick_a", GOOD.format(sleep=0))
    model(repo, "quick_b", GOOD.format(sleep=0))
    model(repo, "slow", GOOD.format(sleep=3.5))
    with running_server(repo, log_path=tmp_path / "log", ready_timeout=60) as server:
        log = server.log_text()
    assert re.search(r"[0-2] of 3 models loaded \(\d+ s\)", log), log
    assert "loading for" in log
    final = next(line for line in log.splitlines() if "3 of 3 models loaded in" in line)
    assert "slowest 'slow' (" in final


def test_a_quick_start_logs_no_progress(tmp_path):
    repo = tmp_path / "repo"
    model(repo, "quick", GOOD.format(sleep=0))
    with running_server(repo, log_path=tmp_path / "log") as server:
        assert "models loaded" not in server.log_text()


def test_the_worker_log_says_what_changed_once_and_notices_a_worker_gone_silent(caplog):
    """worker_log.py alone, on a short TTL: a change, a restart, a lapse, heartbeats."""
    import asyncio
    import logging

    from pbserve.distributed.worker_log import WorkerLog

    def entry(model: str, instance: str = "a", versions=("1",), state="READY"):
        return {"worker": "w", "model": model, "instance": instance, "state": state,
                "versions": list(versions)}

    async def scenario() -> None:
        worker_log = WorkerLog(ttl_s=0.5, delay_s=0.05)
        for _ in range(3):  # heartbeats of the same entries: one line
            worker_log.changed("m.w", entry("m"))
            worker_log.changed("n.w", entry("n", state="LOADING"))
            await asyncio.sleep(0.1)
        worker_log.changed("n.w", entry("n", versions=("1", "2")))
        worker_log.changed("m.w", None)
        await asyncio.sleep(0.1)
        worker_log.changed("n.w", entry("n", instance="b", versions=("1", "2")))
        await asyncio.sleep(0.1)
        worker_log.changed("x.w", "not an entry")  # ignored, never raised
        await asyncio.sleep(1.2)  # no heartbeat: gone after the TTL

    with caplog.at_level(logging.INFO, logger="pbserve.distributed"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "worker 'w' joined the request plane, serving: m (version 1), n (LOADING)",
        "worker 'w' now serves: n (versions 1, 2); no longer: m",
        "worker 'w' was started again (a new process has its name), serving: "
        "n (versions 1, 2)",
        "worker 'w' is gone: no heartbeat within the registry's TTL (it served: n)",
    ], lines
