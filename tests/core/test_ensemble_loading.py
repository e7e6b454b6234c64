"""Loading ensembles: Triton's load-time checks and words, composing models loaded
with the ensemble in explicit mode, unloading with unload_dependents."""

from __future__ import annotations

import time

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from client_inputs import http_input as h_in
from ensemble_repo import ensemble, step, step_model, write_repository
from pbserve.testing import running_server

import numpy as np


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = write_repository(tmp_path_factory.mktemp("ensembles"))
    step_model(repo, "s_broken", "broken", ["IN"], ["OUT"])
    ensemble(repo, "bad_missing", ["IN"], ["OUT"], [step("nowhere", {"IN": "IN"},
                                                         {"OUT": "OUT"})])
    ensemble(repo, "bad_input_name", ["IN"], ["OUT"], [step("s_add", {"NOPE": "IN"},
                                                            {"OUT": "OUT"})])
    ensemble(repo, "bad_dtype", ["IN"], ["OUT"], [step("s_add", {"IN": "IN"},
                                                       {"OUT": "OUT"})],
             input_types={"IN": "TYPE_INT32"})
    ensemble(repo, "bad_unwritten", ["IN"], ["OUT"], [
        step("s_sum", {"A": "IN", "B": "nothing"}, {"OUT": "OUT"})])
    ensemble(repo, "bad_unused", ["IN", "SPARE"], ["OUT"], [
        step("s_add", {"IN": "IN"}, {"OUT": "OUT"})])
    ensemble(repo, "bad_broken_step", ["IN"], ["OUT"], [
        step("s_broken", {"IN": "IN"}, {"OUT": "OUT"})])
    ensemble(repo, "bad_twice", ["IN"], ["OUT"], [
        step("s_add", {"IN": "IN"}, {"OUT": "OUT"}),
        step("s_add", {"IN": "IN"}, {"OUT": "OUT"})])
    ensemble(repo, "loop_a", ["IN"], ["OUT"], [step("loop_b", {"IN": "IN"}, {"OUT": "OUT"})])
    ensemble(repo, "loop_b", ["IN"], ["OUT"], [step("loop_a", {"IN": "IN"}, {"OUT": "OUT"})])
    with running_server(repo, args=["--model-control-mode", "explicit",
                                    "--load-model", "s_identity"]) as srv:
        yield srv


@pytest.fixture
def http(server):
    client = server.http_client()
    yield client
    client.close()


def load_error(http, name: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        http.load_model(name)
    return str(info.value)


@pytest.mark.parametrize("name,words", [
    ("bad_missing", "load failed for model 'bad_missing': ensemble bad_missing contains models that are not available or "
                    "ambiguous: nowhere"),
    ("bad_input_name", "in ensemble bad_input_name, ensemble tensor IN is mapping to "
                       "non-existing input NOPE in model s_add"),
    ("bad_dtype", "in ensemble bad_dtype, ensemble tensor IN: inconsistent data type: "
                  "TYPE_INT32 is inferred from model bad_dtype while TYPE_FP32 is inferred "
                  "from model s_add"),
    ("bad_unwritten", "output 'OUT' for ensemble 'bad_unwritten' is not written: at least "
                      "one of its depending tensors, 'nothing', is not connected"),
    ("bad_unused", "ensemble input 'SPARE' for ensemble bad_unused' is not used"),
    ("bad_broken_step", "ensemble 'bad_broken_step' depends on 's_broken' which has no "
                        "loaded version. Model 's_broken' loading failed with error: "),
    ("bad_twice", "ensemble tensor 'OUT' can appear in an output map only once for "
                  "ensemble 'bad_twice' step 1"),
    ("loop_a", "circular dependency between ensembles: loop_a -> ... -> loop_b -> loop_a"),
])
def test_a_bad_ensemble_fails_its_load_in_tritons_words(http, name, words):
    assert words in load_error(http, name)
    assert not http.is_model_ready(name)
    # nothing else was touched
    result = http.infer("s_identity", [h_in("INPUT0", np.ones(2, np.float32))])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.ones(2, np.float32))


def test_loading_an_ensemble_loads_its_models_and_unload_dependents(http):
    http.unload_model("s_add")  # loaded by the bad ensembles' loads above
    assert not http.is_model_ready("s_add")
    http.load_model("chain3")
    assert http.is_model_ready("chain3")
    assert http.is_model_ready("s_add")
    data = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(
        http.infer("chain3", [h_in("INPUT0", data)]).as_numpy("OUTPUT0"), data + 1)
    # as in Triton: a composing model going away unloads the ensemble, and its coming
    # back loads the ensemble again
    http.unload_model("s_add")
    assert not http.is_model_ready("chain3")
    state = {m["name"]: (m.get("state"), m.get("reason")) for m in
             http.get_model_repository_index()}
    assert state["chain3"] == ("UNAVAILABLE", "unloaded")
    with pytest.raises(InferenceServerException, match="chain3"):
        http.infer("chain3", [h_in("INPUT0", data)])
    http.load_model("s_add")
    deadline = time.monotonic() + 10
    while not http.is_model_ready("chain3") and time.monotonic() < deadline:
        time.sleep(0.05)
    np.testing.assert_array_equal(
        http.infer("chain3", [h_in("INPUT0", data)]).as_numpy("OUTPUT0"), data + 1)
    # unload_dependents takes the composing models too, except those loaded for
    # themselves (s_identity at start, s_add by the load above) and those another
    # loaded ensemble uses
    http.load_model("diamond")  # s_split, s_sum loaded for it alone; s_add, s_identity
    http.load_model("identity3")  # uses s_identity
    http.unload_model("diamond", unload_dependents=True)
    assert not http.is_model_ready("diamond")
    assert not http.is_model_ready("s_split") and not http.is_model_ready("s_sum")
    assert http.is_model_ready("s_add") and http.is_model_ready("s_identity")
    assert http.is_model_ready("identity3") and http.is_model_ready("chain3")


def test_only_the_steps_making_the_outputs_asked_for_run(http):
    http.load_model("diamond")
    before = http.get_inference_statistics("s_sum")["model_stats"][0]
    data = np.arange(3, dtype=np.float32)
    result = http.infer("diamond", [h_in("IN", data)],
                        outputs=[httpclient.InferRequestedOutput("DOUBLE")])
    np.testing.assert_array_equal(result.as_numpy("DOUBLE"), 2 * data)
    after = http.get_inference_statistics("s_sum")["model_stats"][0]
    assert after["inference_count"] == before["inference_count"]


def test_poll_mode_follows_an_ensembles_config(tmp_path):
    repo = write_repository(tmp_path / "repo")
    args = ["--model-control-mode", "poll", "--repository-poll-secs", "0.2"]
    with running_server(repo, args=args) as server:
        client = server.http_client()
        data = np.arange(3, dtype=np.float32)
        np.testing.assert_array_equal(
            client.infer("chain3", [h_in("INPUT0", data)]).as_numpy("OUTPUT0"), data + 1)
        # the middle step becomes an identity: the next poll reloads the ensemble
        config = repo / "chain3" / "config.pbtxt"
        text = config.read_text().replace('model_name: "s_add" model_version: -1 '
                                          'input_map { key: "IN" value: "t1" } output_map '
                                          '{ key: "OUT" value: "t2" }',
                                          'model_name: "s_identity" model_version: -1 '
                                          'input_map { key: "INPUT0" value: "t1" } output_map '
                                          '{ key: "OUTPUT0" value: "t2" }')
        assert text != config.read_text()
        config.write_text(text)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            out = client.infer("chain3", [h_in("INPUT0", data)]).as_numpy("OUTPUT0")
            if (out == data).all():
                break
            time.sleep(0.1)
        np.testing.assert_array_equal(out, data)
        client.close()
