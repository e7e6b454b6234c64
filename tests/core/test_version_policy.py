"""A model's version_policy (config.pbtxt) decides which versions load; every API asked
for another version answers Triton's NOT_FOUND, over HTTP and gRPC."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pbserve.testing import running_server

MODEL = Path(__file__).parents[1] / "models_ext" / "versioned"
UNKNOWN = "Request for unknown model: 'versioned' version 2 is not found"


def _version(client, module, version: str = "") -> int:
    dummy = module.InferInput("DUMMY", [1], "INT32")
    dummy.set_data_from_numpy(np.zeros(1, np.int32))
    return int(client.infer("versioned", [dummy], model_version=version).as_numpy("VERSION")[0])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    shutil.copytree(MODEL, repo / "versioned")
    with running_server(repo, args=["--model-control-mode", "explicit",
                                    "--load-model", "versioned"]) as srv:
        yield srv


def test_specific_policy_serves_its_versions(server):
    http = server.http_client()
    assert [_version(http, httpclient, v) for v in ("1", "3")] == [1, 3]
    assert _version(http, httpclient) == 3  # no version: the highest served
    assert http.get_model_metadata("versioned")["versions"] == ["1", "3"]
    index = {(m["name"], m.get("version")): m["state"] for m in http.get_model_repository_index()}
    assert index == {("versioned", "1"): "READY", ("versioned", "3"): "READY"}


@pytest.mark.parametrize("call", ["infer", "metadata", "config", "stats"])
def test_http_other_versions_are_not_found(server, call):
    http = server.http_client()
    actions = {
        "infer": lambda: _version(http, httpclient, "2"),
        "metadata": lambda: http.get_model_metadata("versioned", "2"),
        "config": lambda: http.get_model_config("versioned", "2"),
        "stats": lambda: http.get_inference_statistics("versioned", "2"),
    }
    with pytest.raises(InferenceServerException) as err:
        actions[call]()
    assert err.value.status() == "404"
    assert err.value.message() == UNKNOWN
    assert http.is_model_ready("versioned", "2") is False
    assert http.is_model_ready("versioned", "3") is True


@pytest.mark.parametrize("call", ["infer", "metadata", "config", "stats"])
def test_grpc_other_versions_are_not_found(server, call):
    grpc = server.grpc_client()
    actions = {
        "infer": lambda: _version(grpc, grpcclient, "2"),
        "metadata": lambda: grpc.get_model_metadata("versioned", "2"),
        "config": lambda: grpc.get_model_config("versioned", "2"),
        "stats": lambda: grpc.get_inference_statistics("versioned", "2"),
    }
    with pytest.raises(InferenceServerException) as err:
        actions[call]()
    assert err.value.status() == "StatusCode.NOT_FOUND"
    assert err.value.message() == UNKNOWN
    assert grpc.is_model_ready("versioned", "2") is False
    assert _version(grpc, grpcclient, "1") == 1


@pytest.mark.parametrize("policy, served", [
    ({"latest": {"num_versions": 2}}, ["2", "3"]),
    ({"all": {}}, ["1", "2", "3"]),
])
def test_reloaded_policy_changes_the_versions(server, policy, served):
    http = server.http_client()
    config = json.loads(json.dumps(http.get_model_config("versioned")))
    config["version_policy"] = policy
    http.load_model("versioned", config=json.dumps(config))
    try:
        assert http.get_model_metadata("versioned")["versions"] == served
        assert [_version(http, httpclient, v) for v in served] == [int(v) for v in served]
        for version in {"1", "2", "3"} - set(served):
            with pytest.raises(InferenceServerException, match="version 1 is not found"):
                _version(http, httpclient, version)
    finally:
        http.load_model("versioned")  # back to config.pbtxt's specific [1, 3]
    assert http.get_model_metadata("versioned")["versions"] == ["1", "3"]


def test_a_policy_naming_no_existing_version_fails_the_load(server):
    http = server.http_client()
    config = http.get_model_config("versioned")
    config["version_policy"] = {"specific": {"versions": [7]}}
    with pytest.raises(InferenceServerException,
                       match="at least one version must be available under the version "
                             "policy of model 'versioned'"):
        http.load_model("versioned", config=json.dumps(config))
