"""config.pbtxt parsing, Triton's config JSON, metadata, and load-time defaults/checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pbserve.core.config.model_config import (
    apply_auto_complete,
    complete_defaults,
    config_from_dict,
    config_from_json,
    config_to_dict,
    config_to_json,
    config_type_of,
    datatype_of,
    is_decoupled,
    model_metadata,
    parse_model_config,
    read_model_config,
)
from pbserve.errors import ErrorCode, ServerError

CPU = mc.ModelInstanceGroup.KIND_CPU
PY = 'backend: "python" '
CONFORMANCE_MODELS = Path("/work/shared/conformance/models")
needs_conformance = pytest.mark.skipif(not CONFORMANCE_MODELS.is_dir(),
                                       reason="conformance models not present")

ADD_SUB = """
name: "add_sub"
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def make_model(root: Path, name: str, config: str | None, versions=("1",)) -> Path:
    model = root / name
    model.mkdir(parents=True)
    if config is not None:
        (model / "config.pbtxt").write_text(config)
    for v in versions:
        (model / v).mkdir()
        (model / v / "model.py").write_text("class TritonPythonModel: pass\n")
    return model


def complete(text: str, name: str = "m", **kwargs) -> mc.ModelConfig:
    return complete_defaults(parse_model_config(text), name, **kwargs)


def error_of(fn, *args, **kwargs) -> ServerError:
    with pytest.raises(ServerError) as info:
        fn(*args, **kwargs)
    return info.value


# -- reading -------------------------------------------------------------------

@needs_conformance
@pytest.mark.parametrize("model_dir", sorted(CONFORMANCE_MODELS.iterdir()) if
                         CONFORMANCE_MODELS.is_dir() else [], ids=lambda p: p.name)
def test_every_conformance_config_reads_completes_and_round_trips(model_dir: Path) -> None:
    cfg = complete_defaults(read_model_config(model_dir), model_dir.name, model_dir)
    assert cfg.backend == "python" and cfg.name == model_dir.name
    assert config_from_dict(config_to_dict(cfg)) == cfg
    assert config_from_json(config_to_json(cfg)) == cfg


def test_missing_config_pbtxt_is_an_empty_config(tmp_path: Path) -> None:
    model = make_model(tmp_path, "bare", None)
    assert read_model_config(model) == mc.ModelConfig()


def test_syntax_error_names_the_file_and_the_protobuf_problem(tmp_path: Path) -> None:
    model = make_model(tmp_path, "bad", 'name: "bad"\nbackend: "python"\nmax_batch_sise: 2\n')
    err = error_of(read_model_config, model)
    assert err.code == ErrorCode.INVALID_ARG
    assert str(model / "config.pbtxt") in err.message
    assert "max_batch_sise" in err.message and err.message.startswith("failed to read text proto")


def test_a_scalar_field_given_twice_is_refused_as_triton_does() -> None:
    assert error_of(parse_model_config, "max_batch_size: 1\nmax_batch_size: 2").code \
        == ErrorCode.INVALID_ARG


# -- JSON ----------------------------------------------------------------------

def test_config_json_prints_defaults_numbers_and_enum_names_like_triton() -> None:
    d = config_to_dict(complete(ADD_SUB, "add_sub"))
    assert d["max_batch_size"] == 0 and d["platform"] == "" and d["runtime"] == ""
    assert d["input"][0] == {"name": "INPUT0", "data_type": "TYPE_FP32", "format": "FORMAT_NONE",
                             "dims": [4], "is_shape_tensor": False, "allow_ragged_batch": False,
                             "optional": False, "is_non_linear_format_io": False}
    assert d["version_policy"] == {"latest": {"num_versions": 1}}
    assert d["instance_group"] == [{"name": "add_sub", "kind": "KIND_CPU", "count": 1, "gpus": [],
                                    "secondary_devices": [], "profile": [], "passive": False,
                                    "host_policy": ""}]
    assert d["parameters"] == {} and d["model_warmup"] == [] and d["batch_input"] == []
    assert "dynamic_batching" not in d and "model_transaction_policy" not in d
    # Field-number order, as Triton's C++ printer writes them.
    assert list(d)[:6] == ["name", "platform", "backend", "runtime", "version_policy",
                           "max_batch_size"]


def test_config_json_turns_trion_fixed_int64_fields_into_numbers() -> None:
    cfg = complete("""backend: "python" max_batch_size: 8
        version_policy { specific { versions: [1, 3] } }
        input [ { name: "I" data_type: TYPE_INT32 dims: [ -1, 2 ] reshape { shape: [ -1, 2 ] } } ]
        dynamic_batching { max_queue_delay_microseconds: 100 priority_levels: 2
                           default_priority_level: 1
                           default_queue_policy { default_timeout_microseconds: 5 }
                           priority_queue_policy {
                               key: 2 value { default_timeout_microseconds: 7 } } }
        """, check_io=False)
    d = config_to_dict(cfg)
    assert d["input"][0]["dims"] == [-1, 2] and d["input"][0]["reshape"] == {"shape": [-1, 2]}
    assert d["version_policy"]["specific"]["versions"] == [1, 3]
    db = d["dynamic_batching"]
    assert (db["max_queue_delay_microseconds"], db["priority_levels"],
            db["default_priority_level"]) == (100, 2, 1)
    assert db["default_queue_policy"]["default_timeout_microseconds"] == 5
    assert db["priority_queue_policy"] == {"2": {
        "timeout_action": "REJECT", "default_timeout_microseconds": 7,
        "allow_timeout_override": False, "max_queue_size": 0}}
    assert db["preferred_batch_size"] == [8]
    json.dumps(d)  # plain JSON


def test_integral_floats_print_as_integers_like_cpp() -> None:
    cfg = complete("""backend: "python" max_batch_size: 2 sequence_batching {
        control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START
                                                fp32_false_true: [ 0, 1.5 ] } ] } ]
        direct { minimum_slot_utilization: 1 } }""", check_io=False)
    sb = config_to_dict(cfg)["sequence_batching"]
    assert sb["control_input"][0]["control"][0]["fp32_false_true"] == [0, 1.5]
    assert sb["direct"]["minimum_slot_utilization"] == 1
    assert sb["max_sequence_idle_microseconds"] == 1_000_000


def test_config_from_dict_accepts_numbers_or_strings_for_int64() -> None:
    a = config_from_dict({"name": "m", "input": [{"name": "I", "dims": [4, "5"]}],
                          "max_batch_size": 2})
    assert list(a.input[0].dims) == [4, 5] and a.max_batch_size == 2


@pytest.mark.parametrize("bad", [{"nmae": "m"}, {"input": [{"dims": ["x"]}]},
                                 {"max_batch_size": "lots"}, ["not", "an", "object"]])
def test_config_from_dict_refuses_unknown_fields_and_bad_values(bad) -> None:
    assert error_of(config_from_dict, bad).code == ErrorCode.INVALID_ARG


def test_config_from_json_refuses_broken_json() -> None:
    assert error_of(config_from_json, "{nope").code == ErrorCode.INVALID_ARG


# -- datatypes and metadata ------------------------------------------------------

def test_datatype_names_follow_triton_protocol_strings() -> None:
    assert datatype_of(mc.TYPE_FP32) == "FP32" and datatype_of("TYPE_FP32") == "FP32"
    assert datatype_of(mc.TYPE_STRING) == "BYTES" and datatype_of(mc.TYPE_BF16) == "BF16"
    assert datatype_of(mc.TYPE_INVALID) == "<invalid>" and datatype_of("TYPE_NOPE") == "<invalid>"
    assert config_type_of("BYTES") == mc.TYPE_STRING and config_type_of("UINT64") == mc.TYPE_UINT64
    assert config_type_of("FP8") == mc.TYPE_INVALID
    for value in mc.DataType.values():
        if value != mc.TYPE_INVALID:
            assert config_type_of(datatype_of(value)) == value


def test_metadata_adds_the_batch_dimension_only_when_batching() -> None:
    plain = model_metadata(complete(ADD_SUB, "add_sub"), ["1"])
    assert plain == {"name": "add_sub", "versions": ["1"], "platform": "python",
                     "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4]},
                                {"name": "INPUT1", "datatype": "FP32", "shape": [4]}],
                     "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [4]}]}
    batching = model_metadata(complete("""backend: "python" max_batch_size: 4
        input [ { name: "T" data_type: TYPE_STRING dims: [ -1 ] } ]""", "t"), ["2", "3"])
    assert batching["inputs"] == [{"name": "T", "datatype": "BYTES", "shape": [-1, -1]}]
    assert batching["versions"] == ["2", "3"] and batching["outputs"] == []


def test_is_decoupled_reads_the_transaction_policy() -> None:
    assert not is_decoupled(complete(ADD_SUB, "add_sub"))
    assert is_decoupled(complete('backend: "python" model_transaction_policy { decoupled: true }'))


# -- complete_defaults -----------------------------------------------------------

def test_defaults_triton_fills_for_a_python_model() -> None:
    cfg = complete('backend: "python"', "m")
    assert cfg.name == "m" and cfg.default_model_filename == "model.py"
    assert cfg.version_policy.WhichOneof("policy_choice") == "latest"
    assert cfg.version_policy.latest.num_versions == 1
    assert [(g.name, g.kind, g.count) for g in cfg.instance_group] == [("m", CPU, 1)]
    assert cfg.optimization.input_pinned_memory.enable
    assert cfg.optimization.output_pinned_memory.enable


def test_complete_defaults_leaves_its_argument_alone() -> None:
    raw = parse_model_config('backend: "python"')
    complete_defaults(raw, "m")
    assert raw == parse_model_config('backend: "python"')


def test_unnamed_groups_are_named_by_index_and_count_defaults_to_one() -> None:
    cfg = complete('backend: "python" instance_group [ { kind: KIND_CPU }, { count: 3 } ]', "m")
    assert [(g.name, g.kind, g.count) for g in cfg.instance_group] == [("m_0", CPU, 1),
                                                                        ("m_1", CPU, 3)]


def test_gpu_groups_without_gpus_are_refused_as_a_cpu_only_triton_does() -> None:
    err = error_of(complete, 'backend: "python" instance_group [ { kind: KIND_GPU } ]', "m")
    assert err.message == ("instance group m_0 of model m has kind KIND_GPU but server does not "
                           "support GPUs")


def test_gpu_groups_get_every_gpu_when_there_are_some() -> None:
    cfg = complete('backend: "python" instance_group [ { kind: KIND_GPU }, { kind: KIND_AUTO } ]',
                   "m", gpus=[1, 0])
    assert [list(g.gpus) for g in cfg.instance_group] == [[0, 1], [0, 1]]
    assert all(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in cfg.instance_group)
    err = error_of(complete, 'backend: "python" instance_group [ { kind: KIND_GPU gpus: [ 3 ] } ]',
                   "m", gpus=[0])
    assert "specifies invalid or unsupported gpu id 3" in err.message
    assert "6.000000 are: 0" in err.message


def test_cpu_group_naming_gpus_is_refused() -> None:
    err = error_of(complete, PY + "instance_group [ { kind: KIND_CPU gpus: [0] } ]", "m")
    assert err.message == ("instance group m_0 of model m has kind KIND_CPU but specifies one or "
                           "more GPUs")


def test_batching_defaults_follow_max_batch_size() -> None:
    cfg = complete('backend: "python" max_batch_size: 8 dynamic_batching { }')
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8]
    cfg = complete('backend: "python" dynamic_batching { }')
    assert list(cfg.dynamic_batching.preferred_batch_size) == []
    cfg = complete('backend: "python" max_batch_size: 2 sequence_batching { oldest { } }')
    assert cfg.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(cfg.sequence_batching.oldest.preferred_batch_size) == [2]


def test_backend_is_inferred_from_model_py_when_missing(tmp_path: Path) -> None:
    model = make_model(tmp_path, "guess", "")
    cfg = complete_defaults(read_model_config(model), "guess", model)
    assert cfg.backend == "python" and cfg.name == "guess"


FP32_I = 'name: "I" data_type: TYPE_FP32'
SEQ = PY + "max_batch_size: 1 sequence_batching { control_input [ "


@pytest.mark.parametrize("text, name, message", [
    ('name: "other" backend: "python"', "m",
     "unexpected directory name 'm' for model 'other', directory name must equal model name"),
    (PY + "max_batch_size: -1", "m", "'max_batch_size' must be non-negative value for m"),
    ('backend: "vllm"', "m",
     ("unable to find backend library for backend 'vllm', try specifying runtime on the "
      "model configuration.")),
    ("", "m",
     ("Invalid model name: Could not determine backend for model 'm' with no backend in model "
      "configuration. Expected model name of the form 'model.<backend_name>'.")),
    ('default_model_filename: "main.py"', "m", "unexpected platform type '' for m"),
    (PY + "max_batch_size: 2 dynamic_batching { preferred_batch_size: [ 4 ] }", "m",
     "dynamic batching preferred size must be <= max batch size for m"),
    (PY + 'input [ { name: "I" dims: [ 1 ] } ]', "m",
     "model input 'I' must specify 'data_type' for m"),
    (PY + f"input [ {{ {FP32_I} }} ]", "m", "model input 'I' must specify 'dims' for m"),
    (PY + 'output [ { name: "O" data_type: TYPE_FP32 dims: [ 0 ] } ]', "m",
     ("model output 'O' dimension must be integer >= 1, or -1 to indicate a variable-size "
      "dimension for m")),
    (PY + "input [ { data_type: TYPE_FP32 dims: [ 1 ] } ]", "m",
     "model input must specify 'name' for m"),
    (PY + f"input [ {{ {FP32_I} dims: [ 1 ] }}, {{ {FP32_I} dims: [ 2 ] }} ]", "m",
     "model input 'I' is specified more than once for m"),
    (PY + f"input [ {{ {FP32_I} dims: [ 4 ] reshape {{ shape: [ 3 ] }} }} ]", "m",
     "model input 'I' has different size for dims and reshape for m"),
    (PY + f"input [ {{ {FP32_I} dims: [ 1 ] reshape {{ }} }} ]", "m",
     ("model input 'I' cannot have empty reshape for non-batching model as scalar tensors are "
      "not supported for m")),
    (PY + f"input [ {{ {FP32_I} dims: [ 1 ] is_shape_tensor: true }} ]", "m",
     "shape tensors are only supported for TensorRT platform for m"),
    (SEQ + '{ name: "S" control [ { kind: CONTROL_SEQUENCE_START } ] } ] }', "m",
     ("sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
      "'bool_false_true' for CONTROL_SEQUENCE_START for m")),
    (SEQ + '{ name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ] }',
     "m",
     ("unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types are "
      "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING")),
    (SEQ + '{ name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] }, '
     '{ name: "S" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] } ] } ] }', "m",
     "sequence batching control tensor 'S' is specified for multiple control kinds for m"),
    (PY + "ensemble_scheduling { }", "m",
     "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble"),
    (PY + "model_transaction_policy { decoupled: true } response_cache { enable: true }", "m",
     ("Response Cache does not currently support model m with 'decoupled' transaction policy. "
      "Please disable the response cache.")),
])
def test_invalid_configs_fail_with_tritons_words(text: str, name: str, message: str) -> None:
    err = error_of(complete, text, name)
    assert (err.code, err.message) == (ErrorCode.INVALID_ARG, message)


def test_io_checks_wait_for_auto_complete_when_asked() -> None:
    incomplete = 'backend: "python" input [ { name: "I" } ]'
    cfg = complete(incomplete, check_io=False)
    updated = config_from_dict({"max_batch_size": 4, "dynamic_batching": {},
                                "input": [{"name": "I", "data_type": "TYPE_FP32", "dims": [4]}],
                                "model_transaction_policy": {"decoupled": True}})
    done = apply_auto_complete(cfg, updated)
    assert done.max_batch_size == 4 and list(done.dynamic_batching.preferred_batch_size) == [4]
    assert done.input[0].data_type == mc.TYPE_FP32 and is_decoupled(done)
    assert done.instance_group[0].name == "m"
    with pytest.raises(ServerError, match="must specify 'data_type'"):
        apply_auto_complete(cfg, cfg)


def test_auto_complete_may_not_switch_the_scheduler() -> None:
    cfg = complete('backend: "python" max_batch_size: 2 dynamic_batching { }')
    updated = config_from_dict({"max_batch_size": 2, "sequence_batching": {}})
    err = error_of(apply_auto_complete, cfg, updated)
    assert err.code == ErrorCode.INTERNAL
    assert err.message == "Cannot update scheduling choice from 11 to 11 when auto-completing."


ENS = 'platform: "ensemble" input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ] ' \
    'output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ] '


def _step(model: str, inputs: str, outputs: str) -> str:
    maps = "".join(f'input_map {{ key: "{k}" value: "{v}" }} ' for k, v in
                   (p.split("=") for p in inputs.split(",") if p))
    maps += "".join(f'output_map {{ key: "{k}" value: "{v}" }} ' for k, v in
                    (p.split("=") for p in outputs.split(",") if p))
    return f'{{ model_name: "{model}" {maps}}}'


@pytest.mark.parametrize("steps,message", [
    ("", "must specify 'step' for ensemble 'e'"),
    (_step("", "X=I", "Y=O"), "must specify 'model_name' in step 0 of ensemble 'e'"),
    (_step("a", "", "Y=O"), "must specify 'input_map' in step 0 of ensemble 'e'"),
    (_step("a", "X=I", ""), "must specify 'output_map' in step 0 of ensemble 'e'"),
    (_step("a", "X=I", "Y=O") + "," + _step("b", "X=I", "Y=O"),
     "ensemble tensor 'O' can appear in an output map only once for ensemble 'e' step 1"),
    (_step("a", "X=J", "Y=O"), "ensemble input 'I' for ensemble e' is not used"),
    (_step("a", "X=I", "Y=P"), "ensemble output 'O' for ensemble e' is not used"),
    (_step("a", "X=I,Z=t", "Y=O"),
     "output 'O' for ensemble 'e' is not written: at least one of its depending tensors, "
     "'t', is not connected"),
    (_step("a", "X=I", "Y=O,W=spare"), "ensemble tensor 'spare' is unused in ensemble 'e'"),
])
def test_ensemble_structure_is_checked_in_tritons_words(steps: str, message: str) -> None:
    text = ENS + ("ensemble_scheduling { step [ " + steps + " ] }" if steps else "")
    err = error_of(complete, text, "e")
    assert (err.code, err.message) == (ErrorCode.INVALID_ARG, message)


def test_an_ensemble_takes_no_instances_and_no_backend() -> None:
    cfg = complete(ENS + "ensemble_scheduling { step [ " + _step("a", "X=I", "Y=O") + " ] }",
                   "e")
    assert not cfg.instance_group and not cfg.backend and cfg.platform == "ensemble"
    text = ENS + 'instance_group [ { count: 1 } ] ensemble_scheduling { step [ ' + \
        _step("a", "X=I", "Y=O") + " ] }"
    assert error_of(complete, text, "e").message == \
        "instance group should not be specified for ensemble 'e'"
