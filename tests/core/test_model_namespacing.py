"""--model-namespacing against a real server, as tritonserver 2.51 answers it.

Two repositories each hold a model `m` (adding 1 in A, 2 in B) and an ensemble calling
`m`; A also holds a BLS model calling `m`. The expected answers were taken from the real
tritonserver 2.51 started with the same repositories and flag.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import running_server

IO = ('input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
      'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')
ADD = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + {add})])
            for r in requests]
"""
BLS = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            resp = pb_utils.InferenceRequest(
                model_name="m", inputs=[pb_utils.get_input_tensor_by_name(r, "IN")],
                requested_output_names=["OUT"]).exec()
            if resp.has_error():
                raise pb_utils.TritonModelException(resp.error().message())
            out.append(pb_utils.InferenceResponse(resp.output_tensors()))
        return out
"""
AMBIGUOUS = ("There are 2 identifiers of model 'm' in global map, model namespace must be "
             "provided to resolve ambiguity.")


def _python_model(path: Path, name: str, source: str) -> None:
    (path / name / "1").mkdir(parents=True)
    (path / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{IO}')
    (path / name / "1" / "model.py").write_text(textwrap.dedent(source))


def _ensemble(path: Path, name: str) -> None:
    (path / name / "1").mkdir(parents=True)
    (path / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 0\n{IO}'
        'ensemble_scheduling { step [ { model_name: "m" model_version: -1 '
        'input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }\n')


@pytest.fixture
def repositories(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "repoA", tmp_path / "repoB"
    for repo, add in ((a, 1), (b, 2)):
        _python_model(repo, "m", ADD.format(add=add))
        _ensemble(repo, f"ens_{repo.name[-1]}")
    _python_model(a, "bls", BLS)
    return a, b


def _infer(client, model: str) -> np.ndarray:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    tensor = module.InferInput("IN", [2], "FP32")
    tensor.set_data_from_numpy(np.zeros(2, np.float32))
    return client.infer(model, [tensor]).as_numpy("OUT")


def test_each_repository_keeps_its_model_and_ensembles_call_their_own(
        repositories: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = repositories
    with running_server(a, b, args=["--model-namespacing=true"],
                        log_path=tmp_path / "log") as server:
        http, grpc = server.http_client(), server.grpc_client()
        assert http.is_server_ready()
        # Ensembles address the model of their own repository
        assert _infer(http, "ens_A").tolist() == [1.0, 1.0]
        assert _infer(grpc, "ens_B").tolist() == [2.0, 2.0]
        # ... and say so in their config, as Triton fills it in
        step = http.get_model_config("ens_A")["ensemble_scheduling"]["step"][0]
        assert step["model_namespace"] == str(a.resolve())
        # The index lists both, by repository then name, under the plain name
        index = http.get_model_repository_index()
        assert [(m["name"], m["state"]) for m in index] == [
            ("bls", "READY"), ("ens_A", "READY"), ("m", "READY"),
            ("ens_B", "READY"), ("m", "READY")]
        assert [m.name for m in grpc.get_model_repository_index().models] == [
            "bls", "ens_A", "m", "ens_B", "m"]
        # A client cannot name an ambiguous model: Triton's words and codes
        for call in (lambda: _infer(http, "m"), lambda: http.get_model_metadata("m"),
                     lambda: http.get_model_config("m")):
            with pytest.raises(InferenceServerException, match="global map") as err:
                call()
            assert err.value.message().endswith(AMBIGUOUS) and err.value.status() == "400"
        with pytest.raises(InferenceServerException, match="global map") as err:
            _infer(grpc, "m")
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert not http.is_model_ready("m") and not grpc.is_model_ready("m")
        with pytest.raises(InferenceServerException,
                           match="requested model 'm' is not available"):
            http.get_inference_statistics("m")
        with pytest.raises(InferenceServerException, match="global map"):
            http.get_inference_statistics()  # fails too in Triton 2.51 (other words)
        # A BLS call naming it fails with Triton's words too
        with pytest.raises(InferenceServerException, match="Model 'm' is not ready"):
            _infer(http, "bls")
    assert f"successfully loaded '{a.resolve()}::m'" in server.log_text()


def test_without_the_flag_the_name_is_unusable(repositories: tuple[Path, Path],
                                               tmp_path: Path) -> None:
    a, b = repositories
    with running_server(a, b, ready_path="/v2/health/live",
                        log_path=tmp_path / "log") as server:
        http = server.http_client()
        assert not http.is_server_ready()
        index = {(m["name"], m.get("state")) for m in http.get_model_repository_index()}
        assert ("m", "UNAVAILABLE") in index and ("ens_A", "UNAVAILABLE") in index
        with pytest.raises(InferenceServerException, match="unknown model: 'm'"):
            _infer(http, "m")
    log = server.log_text()
    assert "failed to poll model 'm': not unique across all model repositories" in log
    assert "ensemble ens_A contains models that are not available or ambiguous: m" in log


def test_explicit_load_and_unload_take_every_place_of_the_name(
        repositories: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = repositories
    with running_server(a, b, args=["--model-namespacing", "--model-control-mode=explicit"],
                        log_path=tmp_path / "log") as server:
        http = server.http_client()
        http.load_model("m")
        assert [(m["name"], m.get("state")) for m in http.get_model_repository_index()
                if m["name"] == "m"] == [("m", "READY"), ("m", "READY")]
        http.load_model("ens_B")
        assert _infer(http, "ens_B").tolist() == [2.0, 2.0]
        http.unload_model("m")
        assert not http.is_model_ready("ens_B")  # it went with its step, as in Triton
        assert {m.get("state") for m in http.get_model_repository_index()
                if m["name"] == "m"} == {"UNAVAILABLE"}


def test_poll_mode_adds_the_second_place_of_a_name_beside_the_first(tmp_path: Path) -> None:
    a, b = tmp_path / "repoA", tmp_path / "repoB"
    _python_model(a, "m", ADD.format(add=1))
    b.mkdir()
    args = ["--model-namespacing=true", "--model-control-mode=poll",
            "--repository-poll-secs=0.2"]
    with running_server(a, b, args=args, log_path=tmp_path / "log") as server:
        http = server.http_client()
        assert _infer(http, "m").tolist() == [1.0, 1.0]
        _python_model(b, "m", ADD.format(add=2))
        deadline = time.monotonic() + 60
        while sum(m.get("state") == "READY" for m in http.get_model_repository_index()) < 2:
            assert time.monotonic() < deadline, http.get_model_repository_index()
            time.sleep(0.1)
        assert [(m["name"], m["state"]) for m in http.get_model_repository_index()] == [
            ("m", "READY"), ("m", "READY")]
        with pytest.raises(InferenceServerException, match="global map"):
            _infer(http, "m")
    # the first one served on, untouched
    assert server.log_text().count(f"successfully loaded '{a.resolve()}::m'") == 1
