"""Triton Python-backend API parity, through real stubs: what `initialize` gets, version
policies, default_model_filename, instance groups, config parameters, Logger, auto-complete,
custom metrics, model control from a model, EXECUTION_ENV_PATH, and misuse errors.

The models live in tests/models_parity (not tests/models, which other suites serve whole:
some of these must fail to load, one needs an environment this file builds).
"""

from __future__ import annotations

import json
import re
import shutil
import sysconfig
import tarfile
import time
import urllib.request
import venv
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from pbserve.core.observability.custom_metrics import COUNTER, GAUGE, HISTOGRAM, CustomMetrics
from pbserve.errors import ServerError
from pbserve.testing import running_server

PARITY = Path(__file__).resolve().parents[1] / "models_parity"
STARTUP = ["parity_args", "parity_groups", "parity_filename", "parity_logger",
           "parity_autocomplete", "parity_metrics", "parity_control", "parity_misuse"]
INIT_ARG_KEYS = {"model_config", "model_instance_kind", "model_instance_name",
                 "model_instance_device_id", "model_repository", "model_version", "model_name"}


def tensor(name: str, value) -> httpclient.InferInput:
    """A one-element input: a str as BYTES, a numpy scalar as its own datatype."""
    array = np.array([value.encode()], np.object_) if isinstance(value, str) else np.array([value])
    t = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    t.set_data_from_numpy(array)
    return t


DUMMY = [tensor("DUMMY", np.int32(0))]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Explicit model control: what a model loads and unloads is the test's to say."""
    log = tmp_path_factory.mktemp("parity") / "server.log"
    args = ["--model-control-mode", "explicit", "--log-verbose", "0"]
    for name in STARTUP:
        args += ["--load-model", name]
    with running_server(PARITY, args=args, log_path=log) as srv:
        yield srv


@pytest.fixture(scope="module")
def env_server(tmp_path_factory):
    """Model control none, --log-verbose 1, and two EXECUTION_ENV_PATH models: one a
    venv directory, one the same venv packed as a .tar.gz (unpacked under TMPDIR)."""
    base = tmp_path_factory.mktemp("parity_env")
    repo = base / "repo"
    repo.mkdir()
    for name in ("parity_logger", "parity_control"):
        (repo / name).symlink_to(PARITY / name, target_is_directory=True)
    shutil.copytree(PARITY / "parity_env", repo / "parity_env_dir")
    make_env(repo / "parity_env_dir" / "pyenv")
    packed = repo / "parity_env_tar"
    shutil.copytree(PARITY / "parity_env", packed)
    config = packed / "config.pbtxt"
    config.write_text(config.read_text().replace("/pyenv", "/pyenv.tar.gz"))
    make_env(base / "packed")
    with tarfile.open(packed / "pyenv.tar.gz", "w:gz") as tar:
        for entry in sorted((base / "packed").iterdir()):
            tar.add(entry, arcname=entry.name)
    unpack_root = base / "tmp"
    unpack_root.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(unpack_root))  # the server unpacks the archive there
        with running_server(repo, args=["--log-verbose", "1"],
                            log_path=base / "server.log") as srv:
            srv.repo, srv.unpack_root = repo, unpack_root
            yield srv


def make_env(path: Path) -> None:
    """A Python environment with its own bin/python that sees this one's packages
    (numpy, posix-ipc) through a .pth file: all a stub needs."""
    venv.create(path, with_pip=False, symlinks=True)
    site = path / "lib" / f"python{sysconfig.get_python_version()}" / "site-packages"
    (site / "pbserve_test_parent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")


def text(result, name: str) -> str:
    return result.as_numpy(name)[0].decode()


def metrics_text(srv) -> str:
    with urllib.request.urlopen(srv.metrics_url, timeout=5) as reply:
        return reply.read().decode()


def control(client, op: str, name: str) -> str:
    return text(client.infer("parity_control", [tensor("OP", op), tensor("NAME", name)]),
                "RESULT")


def source_line(model: Path, needle: str) -> int:
    lines = model.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


# -- initialize, config ---------------------------------------------------------------
def test_initialize_gets_every_key_triton_passes_as_str(server):
    args = json.loads(text(server.http_client().infer("parity_args", DUMMY), "ARGS"))
    assert set(args) == INIT_ARG_KEYS
    assert all(isinstance(v, str) for v in args.values())
    assert args["model_name"] == "parity_args"
    assert args["model_version"] == "1"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_name"] == "parity_args_0_0"
    assert args["model_instance_device_id"] == "0"
    assert Path(args["model_repository"]) == PARITY / "parity_args"
    config = json.loads(args["model_config"])
    assert config["name"] == "parity_args" and config["backend"] == "python"
    assert config["input"][0]["name"] == "DUMMY"


def test_config_parameters_reach_the_model_as_string_values(server):
    args = json.loads(text(server.http_client().infer("parity_args", DUMMY), "ARGS"))
    assert json.loads(args["model_config"])["parameters"] == {
        "greeting": {"string_value": "hello-parity"}, "answer": {"string_value": "42"}}


def test_default_model_filename_names_the_file_to_run(server):
    assert text(server.http_client().infer("parity_filename", DUMMY), "FILE") == "entry.py"


def test_two_instance_groups_make_instances_named_group_index(server):
    log = server.log_text()
    names = set(re.findall(r"parity-instance (\S+) kind CPU", log))
    assert names == {"parity_groups_0_0", "parity_groups_0_1", "parity_extra_0"}
    client = server.http_client()
    seen = {text(client.infer("parity_groups", DUMMY), "INSTANCE") for _ in range(6)}
    assert seen <= names


VERSIONS_CONFIG = {
    "name": "parity_versions", "backend": "python", "max_batch_size": 0,
    "input": [{"name": "DUMMY", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "VERSION", "data_type": "TYPE_STRING", "dims": [1]}],
}


@pytest.mark.parametrize("policy, served", [
    (None, {"3"}),  # no policy: latest 1
    ({"latest": {"num_versions": 2}}, {"2", "3"}),
    ({"all": {}}, {"1", "2", "3"}),
    ({"specific": {"versions": [1, 3]}}, {"1", "3"}),
], ids=["default-latest-1", "latest-2", "all", "specific-1-3"])
def test_version_policy_selects_the_versions_served(server, policy, served):
    client = server.http_client()
    config = None if policy is None else json.dumps({**VERSIONS_CONFIG, "version_policy": policy})
    client.load_model("parity_versions", config=config)
    try:
        for version in ("1", "2", "3"):
            assert client.is_model_ready("parity_versions", version) == (version in served)
            if version in served:
                result = client.infer("parity_versions", DUMMY, model_version=version)
                assert text(result, "VERSION") == version
            else:
                with pytest.raises(InferenceServerException, match=(
                        f"Request for unknown model: 'parity_versions' version {version} "
                        "is not found")):
                    client.infer("parity_versions", DUMMY, model_version=version)
        latest = client.infer("parity_versions", DUMMY)  # no version: the highest served
        assert text(latest, "VERSION") == max(served)
    finally:
        client.unload_model("parity_versions")


# -- Logger ---------------------------------------------------------------------------
def logger_lines(srv, token: str) -> dict[str, str]:
    srv.http_client().infer("parity_logger", [tensor("TOKEN", token)])
    log = srv.log_text()
    return {kind: next((line for line in log.splitlines() if f"parity-{kind}-{token}" in line), "")
            for kind in ("info", "warn", "error", "verbose", "log")}


def test_logger_levels_reach_the_server_log_with_file_and_line(server):
    lines = logger_lines(server, "t0")
    model = PARITY / "parity_logger" / "1" / "model.py"
    for kind, call, level in (("info", "log_info(", "I"), ("warn", "log_warn(", "W"),
                              ("error", "log_error(", "E"), ("log", "logger.log(", "W")):
        assert lines[kind].startswith(level), lines[kind]
        assert f'model.py:{source_line(model, call)}] "parity-{kind}-t0' in lines[kind]
    assert lines["verbose"] == ""  # --log-verbose 0


def test_log_verbose_is_shown_at_log_verbose_1(env_server):
    lines = logger_lines(env_server, "t1")
    model = PARITY / "parity_logger" / "1" / "model.py"
    assert f'model.py:{source_line(model, "log_verbose(")}] "parity-verbose-t1' in lines["verbose"]
    assert lines["info"] and lines["error"]


# -- auto_complete_config -------------------------------------------------------------
def test_auto_complete_config_makes_a_model_without_config_pbtxt(server):
    assert not (PARITY / "parity_autocomplete" / "config.pbtxt").exists()
    client = server.http_client()
    config = client.get_model_config("parity_autocomplete")
    assert config["name"] == "parity_autocomplete" and config["backend"] == "python"
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == \
        [("IN", "TYPE_FP32", [2])]
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    inp = httpclient.InferInput("IN", [2, 2], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("parity_autocomplete", [inp]).as_numpy("OUT"),
                                  x * 2)


def test_auto_complete_conflicting_add_input_fails_the_load_with_tritons_error(server):
    client = server.http_client()
    with pytest.raises(InferenceServerException) as err:
        client.load_model("parity_autocomplete_conflict")
    assert err.value.status() == "400"
    assert ("unable to load model 'parity_autocomplete_conflict', configuration expects "
            "datatype TYPE_FP32 for input 'INPUT0', model provides TYPE_INT32") \
        in err.value.message()
    assert not client.is_model_ready("parity_autocomplete_conflict")


# -- custom metrics -------------------------------------------------------------------
def test_custom_metrics_appear_on_the_metrics_port_and_go_with_their_model(server):
    client = server.http_client()
    for value in (5.0, 50.0):
        result = client.infer("parity_metrics", [tensor("VALUE", np.float32(value))])
    # Two Metric objects with the same labels are one series: 2 increments a request.
    assert result.as_numpy("COUNT")[0] == 4.0
    assert text(result, "MISUSE") == ("Error when creating MetricFamily: Family name "
                                      "already exists with different type")
    body = metrics_text(server)
    labels = 'model="parity_metrics",version="1"'
    for line in ("# HELP parity_requests_total Requests seen",
                 "# TYPE parity_requests_total counter",
                 f"parity_requests_total{{{labels}}} 4",
                 "# TYPE parity_queue_depth gauge",
                 f"parity_queue_depth{{{labels}}} 50",
                 "# TYPE parity_latency_ms histogram",
                 f"parity_latency_ms_count{{{labels}}} 2",
                 f"parity_latency_ms_sum{{{labels}}} 55",
                 f'parity_latency_ms_bucket{{{labels},le="1"}} 0',
                 f'parity_latency_ms_bucket{{{labels},le="10"}} 1',
                 f'parity_latency_ms_bucket{{{labels},le="100"}} 2',
                 f'parity_latency_ms_bucket{{{labels},le="+Inf"}} 2'):
        assert line in body.splitlines(), line
    assert 'version="temporary"' not in body  # a deleted Metric's series is gone
    assert body.rindex("nv_inference_") < body.index("# HELP parity_requests_total")
    client.unload_model("parity_metrics")
    assert "parity_requests_total" not in metrics_text(server)
    client.load_model("parity_metrics")  # a new model: its counter starts again
    client.infer("parity_metrics", [tensor("VALUE", np.float32(1.0))])
    assert f"parity_requests_total{{{labels}}} 2" in metrics_text(server).splitlines()


# -- model control from a model -------------------------------------------------------
def test_a_model_loads_and_unloads_other_models_and_asks_readiness(server):
    client = server.http_client()
    assert control(client, "ready", "parity_target") == "False"
    assert control(client, "load", "parity_target") == "ok"
    assert client.is_model_ready("parity_target")
    assert control(client, "ready", "parity_target") == "True"
    assert control(client, "ready_v1", "parity_target") == "True"
    assert control(client, "ready_v7", "parity_target") == "False"
    assert text(client.infer("parity_target", DUMMY), "WHO") == "configured-by-config.pbtxt"
    assert control(client, "load_config", "parity_target") == "ok"  # a reload, JSON config
    assert text(client.infer("parity_target", DUMMY), "WHO") == "configured-by-parity_control"
    assert control(client, "unload", "parity_target") == "ok"
    assert not client.is_model_ready("parity_target")
    assert control(client, "ready", "parity_target") == "False"
    assert control(client, "load", "parity_nope") == (
        "TritonModelException: Failed to load model: failed to load 'parity_nope', failed "
        "to poll from model repository")


def test_a_model_loads_another_from_files_it_sends(server):
    client = server.http_client()
    assert control(client, "load_files", "parity_from_files") == "ok"
    try:
        assert text(client.infer("parity_from_files", DUMMY), "WHO") == "loaded-from-files"
    finally:
        client.unload_model("parity_from_files")
    assert not client.is_model_ready("parity_from_files")


def test_a_model_can_unload_itself_once_its_execute_returns(server):
    client = server.http_client()
    assert control(client, "unload", "parity_control") == "ok"
    try:
        deadline = time.monotonic() + 5
        while client.is_model_ready("parity_control") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not client.is_model_ready("parity_control")
    finally:
        client.load_model("parity_control")


def test_model_control_from_a_model_needs_explicit_mode(env_server):
    result = control(env_server.http_client(), "load", "parity_logger")
    assert result == ("TritonModelException: Failed to load model: explicit model load / "
                      "unload is not allowed if model control mode is not EXPLICIT")
    assert control(env_server.http_client(), "ready", "parity_logger") == "True"


# -- EXECUTION_ENV_PATH ---------------------------------------------------------------
def test_execution_env_path_directory_runs_the_stub_with_its_python(env_server):
    client = env_server.http_client()
    executable = Path(text(client.infer("parity_env_dir", DUMMY), "EXECUTABLE"))
    assert executable == env_server.repo.resolve() / "parity_env_dir" / "pyenv" / "bin" / "python"


def test_execution_env_path_archive_is_unpacked_and_used(env_server):
    client = env_server.http_client()
    executable = Path(text(client.infer("parity_env_tar", DUMMY), "EXECUTABLE"))
    assert executable.parts[-2:] == ("bin", "python")
    assert executable.is_relative_to(env_server.unpack_root)


def test_execution_env_path_that_does_not_exist_fails_the_load(server):
    with pytest.raises(InferenceServerException) as err:
        server.http_client().load_model("parity_env")  # tests/models_parity has no pyenv
    assert "EXECUTION_ENV_PATH" in err.value.message()
    assert str(PARITY / "parity_env" / "pyenv") in err.value.message()


# -- misuse ---------------------------------------------------------------------------
def test_requesting_an_output_the_config_does_not_have_is_tritons_400(server):
    with pytest.raises(InferenceServerException) as err:
        server.http_client().infer("parity_misuse", [tensor("MODE", "dtype")],
                                   outputs=[httpclient.InferRequestedOutput("NOPE")])
    assert err.value.status() == "400"
    assert err.value.message() == "unexpected inference output 'NOPE' for model 'parity_misuse'"


def test_outputs_come_back_as_the_model_made_them_and_only_config_outputs(server):
    """Triton checks neither the datatype a model returns nor that it returned every
    requested output: OUT_A comes back INT32 (the config says FP32), OUT_B is absent.
    An output the config does not list (EXTRA) is never sent, requested or not."""
    client = server.http_client()
    both = [httpclient.InferRequestedOutput("OUT_A"), httpclient.InferRequestedOutput("OUT_B")]
    for outputs in (both, None):
        result = client.infer("parity_misuse", [tensor("MODE", "dtype")], outputs=outputs)
        sent = {o["name"]: o["datatype"] for o in result.get_response()["outputs"]}
        assert sent == {"OUT_A": "INT32"}
        assert result.as_numpy("OUT_A").tolist() == [7]
        assert result.as_numpy("OUT_B") is None


def test_tensor_from_non_contiguous_dlpack_fails_the_request(server):
    with pytest.raises(InferenceServerException) as err:
        server.http_client().infer("parity_misuse", [tensor("MODE", "dlpack")])
    assert err.value.status() == "500"
    assert "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored " \
        "in C-Order are supported." in err.value.message()
    assert server.http_client().infer("parity_misuse", [tensor("MODE", "dtype")])


# -- the example ----------------------------------------------------------------------
def test_custom_metrics_example_counts_requests_and_times_them(tmp_path):
    examples = PARITY.parent.parent / "models" / "examples"
    args = ["--model-control-mode", "explicit", "--load-model", "custom_metrics"]
    with running_server(examples, args=args, log_path=tmp_path / "log") as srv:
        values = np.array([3, 1, 2], np.float32)
        inp = httpclient.InferInput("INPUT0", [3], "FP32")
        inp.set_data_from_numpy(values)
        client = srv.http_client()
        for _ in range(3):
            result = client.infer("custom_metrics", [inp])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.sort(values))
        lines = metrics_text(srv).splitlines()
    labels = 'model="custom_metrics",version="1"'
    assert f"custom_metrics_requests_total{{{labels}}} 3" in lines
    assert f"custom_metrics_execute_ms_count{{{labels}}} 3" in lines
    assert f'custom_metrics_execute_ms_bucket{{{labels},le="+Inf"}} 3' in lines


# -- the parent's registry, without a server ------------------------------------------
def test_registry_shares_families_by_name_and_series_by_labels():
    reg = CustomMetrics(reserved=["nv_inference_count"])
    a, b = object(), object()  # two stubs
    reg.family_new(a, 1, "hits", "first help", COUNTER)
    reg.family_new(b, 1, "hits", "second help", COUNTER)  # the same family
    reg.metric_new(a, 2, 1, {"m": "x"}, None)
    reg.metric_new(b, 2, 1, {"m": "x"}, None)  # the same series
    reg.metric_op(a, 2, "increment", 2)
    assert reg.metric_op(b, 2, "value", 0) == 2
    assert reg.render() == '# HELP hits first help\n# TYPE hits counter\nhits{m="x"} 2\n'
    with pytest.raises(ServerError, match="Family name already exists with different type"):
        reg.family_new(a, 3, "hits", "", GAUGE)
    for bad in ("1abc", "has-dash", "__reserved", ""):
        with pytest.raises(ServerError, match="Invalid metric name"):
            reg.family_new(a, 4, bad, "", GAUGE)
    with pytest.raises(ServerError, match="Family name already exists"):
        reg.family_new(a, 4, "nv_inference_count", "", COUNTER)
    reg.owner_gone(a)  # b still holds family and series
    assert reg.metric_op(b, 2, "value", 0) == 2
    reg.family_delete(b, 1)  # its metrics go with it, then the family (nothing holds it)
    assert reg.render() == ""
    with pytest.raises(ServerError, match="MetricFamily' has been deleted"):
        reg.metric_op(b, 2, "value", 0)
    reg.family_new(a, 5, "hits", "", GAUGE)  # the name is free again


def test_registry_histogram_renders_like_prometheus_cpp():
    reg = CustomMetrics()
    reg.family_new("s", 1, "lat", "", HISTOGRAM)
    with pytest.raises(ServerError, match="Invalid label name"):
        reg.metric_new("s", 2, 1, {"le": "1"}, [1.0])
    reg.metric_new("s", 2, 1, {"b": 'q"\n', "a": "1"}, [0.5, 2.0])
    for value in (0.5, 1.0, 3.0):
        reg.metric_op("s", 2, "observe", value)
    with pytest.raises(ServerError):
        reg.metric_op("s", 2, "increment", 1)
    assert reg.render().splitlines() == [
        "# TYPE lat histogram",
        'lat_count{a="1",b="q\\"\\n"} 3',
        'lat_sum{a="1",b="q\\"\\n"} 4.5',
        'lat_bucket{a="1",b="q\\"\\n",le="0.5"} 1',
        'lat_bucket{a="1",b="q\\"\\n",le="2"} 2',
        'lat_bucket{a="1",b="q\\"\\n",le="+Inf"} 3',
    ]
    reg.metric_delete("s", 2)
    assert reg.render() == ""
